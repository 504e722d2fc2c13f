#!/usr/bin/python3
"""The elementwise sweep, tandem against PyTorch 1.13, each in a process of its own at its
defaults: ~50 elementwise ops and reductions, forward only, f32 (128, 4096). Each round runs
bench_elementwise and benchmarks/elementwise_torch.py, alternating; the table gives each side's
median over the rounds and the median of the per-round ratios (tandem time / PyTorch time; rows
at 1.5x or more are marked). Writes JSON with every round's figures.

  /usr/bin/python3 benchmarks/elementwise_compare.py --threads 2 --rounds 3 --out docs/bench/elementwise.json
"""
import argparse
import os
import sys
import time

from peers import ratio_table, run_side

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "benchmarks"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=30, help="calls per op in a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.rounds < 1:
        p.error("--threads, --repeats and --rounds must be positive")
    common = ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    ours, theirs = [], []
    t0 = time.time()
    for r in range(args.rounds):
        ours.append(run_side([os.path.join(args.bin, "bench_elementwise")] + common))
        theirs.append(run_side([sys.executable, os.path.join(HERE, "elementwise_torch.py")] + common))
        rate = (time.time() - t0) / (r + 1)
        print(f"round {r + 1}/{args.rounds} ({rate:.0f} s a round), ETA "
              f"{rate * (args.rounds - r - 1):.0f} s", flush=True)
    ratio_table(ours, theirs, "op, f32 (128, 4096), forward", 4, args)

if __name__ == "__main__":
    main()
