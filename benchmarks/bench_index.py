#!/usr/bin/python3
"""Indexing by tensors of indices, tandem against PyTorch 1.13 (Debian's python3-torch), side by
side: an embedding lookup (forward; forward + backward into the dense weight gradient) and
index_add of rows, on the same sizes and thread count. Each repeat runs build/benchmarks/
bench_index and the same cases in PyTorch, each in its own process at its own defaults (an
OMP_WAIT_POLICY in the caller's environment is removed), alternating. Writes medians and
ratios (tandem time / PyTorch time) as JSON.

  /usr/bin/python3 benchmarks/bench_index.py --out docs/bench/index.json [--repeats 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

from peers import require_optimized_blas, run_side

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = ["embedding_fwd_ms", "embedding_fwd_bwd_ms", "index_add_ms"]


def torch_worker(args):
    import torch
    import torch.nn.functional as F
    require_optimized_blas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    weight = torch.randn(args.table, args.dim, requires_grad=True)
    ids = torch.randint(0, args.table, (args.tokens,))
    grad = torch.randn(args.tokens, args.dim)
    rows = torch.zeros(args.table, args.dim)

    def time_ms(f):
        for _ in range(3):
            f()
        ms = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            f()
            ms.append((time.perf_counter() - t0) * 1000)
        return sorted(ms)[len(ms) // 2]  # the upper middle, as median.hpp

    def fwd_bwd():
        weight.grad = None
        F.embedding(ids, weight).backward(grad)

    out = {"framework": "pytorch", "version": torch.__version__, "threads": args.threads}
    with torch.no_grad():
        out["embedding_fwd_ms"] = time_ms(lambda: F.embedding(ids, weight))
    out["embedding_fwd_bwd_ms"] = time_ms(fwd_bwd)
    out["index_add_ms"] = time_ms(lambda: rows.index_add_(0, ids, grad))
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "benchmarks"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--table", type=int, default=50000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--out")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    sizes = ["--threads", str(args.threads), "--steps", str(args.steps), "--table",
             str(args.table), "--dim", str(args.dim), "--tokens", str(args.tokens)]
    ours, theirs = [], []
    for r in range(args.repeats):
        ours.append(run_side([os.path.join(args.bin, "bench_index")] + sizes))
        theirs.append(run_side([sys.executable, os.path.abspath(__file__), "--torch-worker"] + sizes))
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{c[:-3]} {ours[-1][c]:.2f} vs {theirs[-1][c]:.2f} ms" for c in CASES), flush=True)
    result = {"threads": args.threads, "table": args.table, "dim": args.dim,
              "tokens": args.tokens, "repeats": args.repeats, "steps": args.steps,
              "pytorch": theirs[0]["version"], "cases": {}}
    print(f"{'case':24} {'tandem ms':>10} {'PyTorch ms':>11} {'ratio':>6}  (medians of "
          f"{args.repeats} repeats; ratio = median of per-repeat tandem/PyTorch)")
    for c in CASES:
        a = statistics.median(o[c] for o in ours)
        b = statistics.median(t[c] for t in theirs)
        ratio = statistics.median(o[c] / t[c] for o, t in zip(ours, theirs))
        result["cases"][c[:-3]] = {"tandem_ms": a, "pytorch_ms": b, "ratio": ratio,
                                   "ratios": [o[c] / t[c] for o, t in zip(ours, theirs)]}
        print(f"{c[:-3]:24} {a:10.3f} {b:11.3f} {ratio:6.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote", args.out)


if __name__ == "__main__":
    main()
