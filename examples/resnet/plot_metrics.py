#!/usr/bin/python3
"""Plots the --metrics file of tandem-resnet: train loss and test accuracy per epoch.

  python3 examples/resnet/plot_metrics.py metrics.jsonl curves.png   (needs python3-matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    if not rows:
        sys.exit(f"{sys.argv[1]}: no metrics lines")
    epochs = [r["epoch"] for r in rows]
    fig, loss_ax = plt.subplots(figsize=(6, 3.5))
    loss_ax.plot(epochs, [r["train_loss"] for r in rows], "o-", color="tab:red", label="train loss")
    loss_ax.set_xlabel("epoch")
    loss_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss_ax.set_ylabel("train loss", color="tab:red")
    acc_ax = loss_ax.twinx()
    acc_ax.plot(epochs, [100 * r["test_acc"] for r in rows], "s-", color="tab:blue", label="test accuracy")
    acc_ax.set_ylabel("test accuracy (%)", color="tab:blue")
    seconds = sum(r["seconds"] for r in rows)
    loss_ax.set_title(f"final test accuracy {100 * rows[-1]['test_acc']:.2f}%, "
                      f"{seconds:.0f} s of training")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
