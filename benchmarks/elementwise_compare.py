#!/usr/bin/python3
"""The elementwise sweep, tandem against PyTorch 1.13, each in a process of its own at its
defaults: ~50 elementwise ops and reductions, forward only, f32 (128, 4096). Each round runs
bench_elementwise and benchmarks/elementwise_torch.py, alternating; the table gives each side's
median over the rounds and the median of the per-round ratios (tandem time / PyTorch time; rows
at 1.5x or more are marked). Writes JSON with every round's figures.

  /usr/bin/python3 benchmarks/elementwise_compare.py --threads 2 --rounds 3 --out docs/bench/elementwise.json
"""
import os
import sys

from peers import alternate_rounds, ratio_table, run_side, sweep_args

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    args = sweep_args(__doc__, os.path.join(ROOT, "build", "benchmarks"), 30,
                      "calls per op in a round")
    common = ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    ours, theirs = alternate_rounds(
        args.rounds, lambda: run_side([os.path.join(args.bin, "bench_elementwise")] + common),
        lambda: run_side([sys.executable, os.path.join(HERE, "elementwise_torch.py")] + common))
    ratio_table(ours, theirs, "op, f32 (128, 4096), forward", 4, args)


if __name__ == "__main__":
    main()
