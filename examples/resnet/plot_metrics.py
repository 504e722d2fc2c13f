#!/usr/bin/python3
"""Plots the --metrics file of tandem-resnet: train loss and test accuracy per epoch; when the
file has them, each rank's step breakdown (ms per step in data wait, compute, exposed
communication and optimizer, from the last report) and each GPU's utilization and SM clock over
the run.

  python3 examples/resnet/plot_metrics.py metrics.jsonl curves.png   (needs python3-matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

PHASES = (("data_ms", "data wait", "tab:orange"), ("compute_ms", "compute", "tab:blue"),
          ("exposed_comm_ms", "exposed communication", "tab:red"), ("optimizer_ms", "optimizer", "tab:green"))


def plot_curves(ax, epochs):
    xs = [r["epoch"] for r in epochs]
    ax.plot(xs, [r["train_loss"] for r in epochs], "o-", color="tab:red", label="train loss")
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("train loss", color="tab:red")
    acc = ax.twinx()
    acc.plot(xs, [100 * r["test_acc"] for r in epochs], "s-", color="tab:blue", label="test accuracy")
    acc.set_ylabel("test accuracy (%)", color="tab:blue")
    seconds = sum(r["seconds"] for r in epochs)
    ax.set_title(f"final test accuracy {100 * epochs[-1]['test_acc']:.2f}%, {seconds:.0f} s of training")


def plot_breakdown(ax, report):
    ranks = report["ranks"]
    xs = [r["rank"] for r in ranks]
    bottom = [0.0] * len(ranks)
    for key, name, color in PHASES:
        vals = [r[key] for r in ranks]
        ax.bar(xs, vals, bottom=bottom, color=color, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(xs)
    ax.set_xlabel("rank")
    ax.set_ylabel("ms per step")
    ax.set_title(f"step breakdown (slowest: rank {report['slowest']}, {report['straggler_phase']})")
    ax.legend(fontsize=7, loc="lower right")


def plot_health(ax, health):
    steps = [h["step"] for h in health]
    gpus = sorted({g["gpu"] for h in health for g in h["gpu_health"]})
    clock = ax.twinx()
    for gpu in gpus:
        samples = [next((g for g in h["gpu_health"] if g["gpu"] == gpu), None) for h in health]
        ax.plot(steps, [s["utilization_pct"] if s else None for s in samples], "o-", label=f"GPU {gpu} utilization")
        clock.plot(steps, [s["sm_clock_mhz"] if s else None for s in samples], "s--", label=f"GPU {gpu} SM clock")
    ax.set_xlabel("step")
    ax.set_ylabel("utilization (%)")
    clock.set_ylabel("SM clock (MHz)")
    ax.set_title("GPU health")
    ax.legend(fontsize=7, loc="lower left")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    epochs = [r for r in rows if "epoch" in r]
    reports = [r["breakdown"] for r in rows if "breakdown" in r]
    health = [r for r in rows if "gpu_health" in r]
    if not epochs:
        sys.exit(f"{sys.argv[1]}: no epoch lines")
    panels = 1 + bool(reports) + bool(health)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 3.8), squeeze=False)
    plot_curves(axes[0][0], epochs)
    if reports:
        plot_breakdown(axes[0][1], reports[-1])
    if health:
        plot_health(axes[0][-1], health)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
