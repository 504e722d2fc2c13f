#!/usr/bin/python3
"""The elementwise sweep's peer: the ops of bench_elementwise.cpp, forward only on f32 (128,
4096), in PyTorch at its own defaults, the median of --repeats calls after a warm-up. Prints the
JSON of medians on its last line."""
import argparse
import json
import os
import sys
import time

if "OMP_WAIT_POLICY" in os.environ:  # read when libgomp loads: restart without it
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, y = torch.randn(128, 4096), torch.randn(128, 4096)
    z = torch.randn(4096, 128)  # z.t() has x's shape, read across
    p = x.abs() + 0.1
    ops = {
        "abs": lambda: x.abs(), "sign": lambda: x.sign(), "floor": lambda: x.floor(),
        "ceil": lambda: x.ceil(), "round": lambda: x.round(), "trunc": lambda: x.trunc(),
        "sin": lambda: x.sin(), "cos": lambda: x.cos(), "tan": lambda: x.tan(),
        "atan": lambda: x.atan(), "erf": lambda: x.erf(), "exp": lambda: x.exp(),
        "expm1": lambda: x.expm1(), "log": lambda: p.log(), "log2": lambda: p.log2(),
        "log10": lambda: p.log10(), "log1p": lambda: p.log1p(), "sqrt": lambda: p.sqrt(),
        "rsqrt": lambda: p.rsqrt(), "reciprocal": lambda: p.reciprocal(),
        "pow 3": lambda: x.pow(3.0), "pow 0.5": lambda: p.pow(0.5), "pow 1.7": lambda: p.pow(1.7),
        "pow tensor": lambda: p.pow(y), "sigmoid": lambda: x.sigmoid(), "tanh": lambda: x.tanh(),
        "neg": lambda: -x, "clamp": lambda: x.clamp(-0.5, 0.5),
        "where": lambda: torch.where(x > y, x, y), "maximum": lambda: torch.maximum(x, y),
        "atan2": lambda: torch.atan2(x, y), "fmod": lambda: torch.fmod(x, p),
        "remainder": lambda: torch.remainder(x, p), "lt": lambda: x < y, "div": lambda: x / p,
        "sub": lambda: x - y, "mul row broadcast": lambda: x * y[0],
        "add column broadcast": lambda: x + y[:, 0:1], "to bf16": lambda: x.to(torch.bfloat16),
        "to f64": lambda: x.double(), "isnan": lambda: x.isnan(),
        "masked_fill": lambda: x.masked_fill(x > 0.5, 0.0), "mean dim 1": lambda: x.mean(1),
        "var dim 1": lambda: x.var(1), "norm": lambda: x.norm(), "argmax dim 1": lambda: x.argmax(1),
        "sum dim 0": lambda: x.sum(0), "sum of the transpose dim 1": lambda: x.t().sum(1),
        "sigmoid of a transpose": lambda: z.t().sigmoid(),
        "contiguous of a transpose": lambda: z.t().contiguous(),
        "add a transpose": lambda: x + z.t(),
    }
    results = {}
    with torch.no_grad():
        for name, op in ops.items():
            op()  # warm-up
            ms = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                op()
                ms.append((time.perf_counter() - start) * 1e3)
            ms.sort()
            results[name] = ms[len(ms) // 2]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
