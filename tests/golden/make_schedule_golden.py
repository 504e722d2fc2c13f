#!/usr/bin/python3
"""Regenerates schedules.json: the learning rates (both groups) and group 0's momentum of
torch.optim.lr_scheduler's schedules (Debian's python3-torch, 1.13) before each of 25 steps, alone,
composed and with rates set by hand. Run: /usr/bin/python3 tests/golden/make_schedule_golden.py

tests/optim/test_schedule.cpp builds the same case by name and checks every rate to the bit."""
import json
import os
import warnings

import torch
from torch.optim import lr_scheduler as S

warnings.filterwarnings("ignore")  # SequentialLR calls step(0), which warns

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 25
METRICS = [1.0, 0.9, 0.95, 0.899, 0.95, 0.96, 0.97, 0.8, 0.81, 0.795, 0.8, 0.9, 0.7, 0.71, 0.72,
           0.73, 0.74, 0.75, 0.6, 0.61, 0.62, 0.63, 0.64, 0.65, 0.66]


def optimizer():
    p0 = torch.zeros(2, requires_grad=True)
    p1 = torch.zeros(3, requires_grad=True)
    return torch.optim.SGD([{"params": [p0]}, {"params": [p1], "lr": 0.02}], lr=0.1, momentum=0.9)


# name -> function(opt) giving (schedules stepped in order each step, {step: action}).
CASES = {
    "lambda": lambda o: ([S.LambdaLR(o, [lambda e: 0.95 ** e, lambda e: 1 / (1 + e)])], {}),
    "lambda_one": lambda o: ([S.LambdaLR(o, lambda e: 0.9 ** (e // 2))], {}),
    "multiplicative": lambda o: ([S.MultiplicativeLR(o, lambda e: 0.9 if e % 3 else 1.05)], {}),
    "step": lambda o: ([S.StepLR(o, 3, 0.5)], {}),
    "multistep": lambda o: ([S.MultiStepLR(o, [7, 2, 7, 12], 0.5)], {}),
    "constant": lambda o: ([S.ConstantLR(o, 0.5, 4)], {}),
    "linear": lambda o: ([S.LinearLR(o, 0.25, 1.0, 6)], {}),
    "linear_decay": lambda o: ([S.LinearLR(o, 1.0, 0.1, 10)], {}),
    "exponential": lambda o: ([S.ExponentialLR(o, 0.9)], {}),
    "polynomial": lambda o: ([S.PolynomialLR(o, 8, 2.0)], {}),
    "cosine": lambda o: ([S.CosineAnnealingLR(o, 6, 0.001)], {}),
    "warm_restarts": lambda o: ([S.CosineAnnealingWarmRestarts(o, 3, 2, 0.001)], {}),
    "warm_restarts_flat": lambda o: ([S.CosineAnnealingWarmRestarts(o, 4)], {}),
    "cyclic_triangular": lambda o: ([S.CyclicLR(o, 0.01, 0.1, step_size_up=4)], {}),
    "cyclic_triangular2": lambda o: (
        [S.CyclicLR(o, 0.01, 0.1, 3, step_size_down=5, mode="triangular2")], {}),
    "cyclic_exp_range": lambda o: (
        [S.CyclicLR(o, 0.01, 0.1, 4, mode="exp_range", gamma=0.9, cycle_momentum=False)], {}),
    "onecycle": lambda o: ([S.OneCycleLR(o, 0.3, total_steps=STEPS, pct_start=0.4)], {}),
    "onecycle_linear_three_phase": lambda o: (
        [S.OneCycleLR(o, 0.5, total_steps=STEPS, anneal_strategy="linear", three_phase=True)], {}),
    # Two schedules on one optimizer, both stepped: their factors multiply.
    "chained_two": lambda o: ([S.StepLR(o, 3, 0.5), S.ExponentialLR(o, 0.9)], {}),
    "chained_scheduler": lambda o: (
        [S.ChainedScheduler([S.ConstantLR(o, 0.5, 4), S.ExponentialLR(o, 0.95)])], {}),
    "sequential_three": lambda o: (
        [S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 4), S.ExponentialLR(o, 0.9),
                            S.StepLR(o, 2, 0.5)], [4, 10])], {}),
    "sequential_warmup_cosine": lambda o: (
        [S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 5), S.CosineAnnealingLR(o, 15, 1e-3)], [5])],
        {}),
    "sequential_multiplicative": lambda o: (
        [S.SequentialLR(o, [S.StepLR(o, 2, 0.5), S.MultiplicativeLR(o, lambda e: 0.9)], [5])], {}),
    # A rate set by hand after step 5 carries on; a schedule made after step 7 starts from the
    # rates then (its base is still the group's initial rate).
    "by_hand": lambda o: ([S.StepLR(o, 3, 0.5)], {5: "set_lr"}),
    "second_later": lambda o: ([S.StepLR(o, 3, 0.5)], {7: "add_cosine"}),
}


def run(name):
    o = optimizer()
    schedules, actions = CASES[name](o)
    lrs, momenta = [], []
    for step in range(STEPS + 1):
        if actions.get(step) == "set_lr":
            o.param_groups[0]["lr"] = 0.3
        if actions.get(step) == "add_cosine":
            schedules.append(S.CosineAnnealingLR(o, 10))
        lrs.append([g["lr"] for g in o.param_groups])
        momenta.append(o.param_groups[0]["momentum"])
        if step == STEPS:
            break
        o.step()
        for s in schedules:
            s.step()
    return {"name": name, "lrs": lrs, "momenta": momenta}


def plateau(name, make):
    o = optimizer()
    s = make(o)
    lrs = []
    for m in METRICS:
        s.step(m)
        lrs.append([g["lr"] for g in o.param_groups])
    return {"name": name, "lrs": lrs}


def main():
    cases = [run(name) for name in CASES]
    cases.append(plateau("plateau_min_rel", lambda o: S.ReduceLROnPlateau(
        o, "min", factor=0.5, patience=2, threshold=0.01, cooldown=1, min_lr=[0.0, 0.004])))
    cases.append(plateau("plateau_max_abs", lambda o: S.ReduceLROnPlateau(
        o, "max", factor=0.3, patience=1, threshold=0.05, threshold_mode="abs", min_lr=0.001,
        eps=1e-3)))
    out = {"torch": torch.__version__, "steps": STEPS, "metrics": METRICS, "cases": cases}
    with open(os.path.join(HERE, "schedules.json"), "w") as f:
        json.dump(out, f, indent=1, allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()
