#!/usr/bin/python3
"""Regenerates optim.json: 20 steps of torch.optim optimizers and schedules (Debian's
python3-torch, 1.13) on a least-squares problem. Run: /usr/bin/python3 tests/golden/make_optim_golden.py

Each case records the learning rate of group 0 and the gradient norm before every step, and the
parameters after the 20 steps. tests/optim/test_optim.cpp builds the same case by name. The last
bits depend on PyTorch's BLAS (the committed cases before "rmsprop" came from the reference BLAS,
the rest from OpenBLAS); the test's tolerances cover either."""
import json
import os

import warnings

import torch

warnings.filterwarnings("ignore")  # SequentialLR calls step(0), which warns

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 20
torch.manual_seed(7)
X = torch.randn(8, 4)
Y = torch.randn(8, 5)
W0 = torch.randn(5, 4) * 0.5
B0 = torch.randn(5) * 0.5


def run(name, make, clip=None):
    W = W0.clone().requires_grad_(True)
    b = B0.clone().requires_grad_(True)
    opt, sched = make(W, b)
    lrs, momenta, norms = [], [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((X @ W.t() + b - Y) ** 2).mean()
        loss.backward()
        lrs.append(opt.param_groups[0]["lr"])
        g = opt.param_groups[0]
        momenta.append(g["betas"][0] if "betas" in g else g.get("momentum", 0.0))
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_([W, b], clip[0], clip[1])))
        opt.step()
        if sched is not None:
            sched.step()
    return {"name": name, "lrs": lrs, "momenta": momenta, "norms": norms,
            "W": W.detach().reshape(-1).tolist(), "b": b.detach().tolist()}


S = torch.optim
L = torch.optim.lr_scheduler
cases = [
    run("sgd", lambda W, b: (S.SGD([W, b], lr=0.1), None)),
    run("sgd_momentum_dampening_wd",
        lambda W, b: (S.SGD([W, b], lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2), None)),
    run("sgd_nesterov_groups",
        lambda W, b: (S.SGD([{"params": [W], "weight_decay": 1e-2},
                             {"params": [b], "weight_decay": 0.0, "lr": 0.02}],
                            lr=0.05, momentum=0.9, nesterov=True), None)),
    run("adamw", lambda W, b: (S.AdamW([W, b], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.05), None)),
    run("adamw_groups_clip2",
        lambda W, b: (S.AdamW([{"params": [W]}, {"params": [b], "weight_decay": 0.0}], lr=2e-2), None),
        clip=(0.5, 2.0)),
    run("sgd_clip_inf", lambda W, b: (S.SGD([W, b], lr=0.1, momentum=0.5), None), clip=(0.3, float("inf"))),
]


def with_sched(opt, f):
    return opt, f(opt)


cases += [
    run("sgd_onecycle", lambda W, b: with_sched(
        S.SGD([W, b], lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4),
        lambda o: L.OneCycleLR(o, max_lr=0.2, total_steps=STEPS))),
    run("adamw_onecycle", lambda W, b: with_sched(
        S.AdamW([W, b], lr=1e-2),
        lambda o: L.OneCycleLR(o, max_lr=3e-2, total_steps=STEPS, pct_start=0.25))),
    run("sgd_warmup_cosine", lambda W, b: with_sched(
        S.SGD([W, b], lr=0.1, momentum=0.9),
        lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.1, total_iters=5),
                                     L.CosineAnnealingLR(o, T_max=15, eta_min=1e-3)],
                                 milestones=[5]))),
    run("sgd_step", lambda W, b: with_sched(S.SGD([W, b], lr=0.1), lambda o: L.StepLR(o, 7, gamma=0.5))),
    run("sgd_multistep", lambda W, b: with_sched(
        S.SGD([W, b], lr=0.1, momentum=0.9), lambda o: L.MultiStepLR(o, [5, 12], gamma=0.3))),
    run("adam", lambda W, b: (S.Adam([W, b], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.05), None)),
    run("adam_groups", lambda W, b: (S.Adam([{"params": [W], "weight_decay": 0.1}, {"params": [b]}],
                                            lr=2e-2), None)),
    run("adam_amsgrad", lambda W, b: (S.Adam([W, b], lr=5e-2, betas=(0.9, 0.9), weight_decay=0.05,
                                             amsgrad=True), None)),
    run("adamw_amsgrad", lambda W, b: (S.AdamW([W, b], lr=5e-2, betas=(0.9, 0.9), amsgrad=True),
                                       None)),
    run("rmsprop", lambda W, b: (S.RMSprop([W, b], lr=1e-2), None)),
    run("rmsprop_centered_momentum_wd",
        lambda W, b: (S.RMSprop([W, b], lr=5e-3, alpha=0.9, eps=1e-6, weight_decay=0.05,
                                momentum=0.8, centered=True), None)),
    run("rmsprop_groups_onecycle", lambda W, b: with_sched(
        S.RMSprop([{"params": [W]}, {"params": [b], "lr": 3e-3}], lr=1e-2, momentum=0.9),
        lambda o: L.OneCycleLR(o, max_lr=2e-2, total_steps=STEPS))),
    run("adagrad", lambda W, b: (S.Adagrad([W, b], lr=0.1), None)),
    run("adagrad_decay_wd_initial",
        lambda W, b: (S.Adagrad([W, b], lr=0.2, lr_decay=0.05, weight_decay=0.02,
                                initial_accumulator_value=0.5, eps=1e-6), None)),
]
# AMSGrad's maximum must matter on this problem, or its cases would prove nothing.
names = [c["name"] for c in cases]
plain = run("adam_plain", lambda W, b: (S.Adam([W, b], lr=5e-2, betas=(0.9, 0.9),
                                               weight_decay=0.05), None))
assert max(abs(x - y) for x, y in zip(plain["W"], cases[names.index("adam_amsgrad")]["W"])) > 1e-3



def run_lbfgs(name, steps, **options):
    """L-BFGS on the same problem: the loss step() returns, the parameters after each step, and
    how often it called the closure in all (its iterations and line search)."""
    W = W0.clone().requires_grad_(True)
    b = B0.clone().requires_grad_(True)
    opt = S.LBFGS([W, b], **options)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = ((X @ W.t() + b - Y) ** 2).mean()
        loss.backward()
        return loss

    losses, params = [], []
    for _ in range(steps):
        losses.append(float(opt.step(closure)))
        params.append(W.detach().reshape(-1).tolist() + b.detach().tolist())
    return {"name": name, "losses": losses, "params": params, "closure_calls": calls[0]}


lbfgs = [
    run_lbfgs("lbfgs", 3, lr=0.5, max_iter=4, history_size=3),
    run_lbfgs("lbfgs_strong_wolfe", 2, lr=1, max_iter=3, line_search_fn="strong_wolfe"),
    run_lbfgs("lbfgs_max_eval", 2, lr=0.8, max_iter=10, max_eval=4, history_size=2),
]

out = {"steps": STEPS, "X": X.reshape(-1).tolist(), "Y": Y.reshape(-1).tolist(),
       "W0": W0.reshape(-1).tolist(), "b0": B0.tolist(), "cases": cases, "lbfgs": lbfgs}
with open(os.path.join(HERE, "optim.json"), "w") as f:
    json.dump(out, f)
print(f"wrote {len(cases)} cases to optim.json")
