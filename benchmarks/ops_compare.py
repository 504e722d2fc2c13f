#!/usr/bin/python3
"""The op sweep, tandem against PyTorch 1.13 with each in a process of its own at its defaults:
common layers' forward + backward (activations, pooling, linear, softmax and losses, layer norm,
dropout, reductions, copies, embedding, bmm; bench_ops --ops). Each round runs
`bench_ops --ops --peer none` and benchmarks/ops_torch.py, alternating, each timing every layer
(median of --repeats); the table gives each side's median over the rounds and the median of the
per-round ratios (tandem time / PyTorch time, above 1: tandem slower; rows at 1.5x or more are
marked). Writes JSON with every round's figures.

  /usr/bin/python3 benchmarks/ops_compare.py --threads 2 --rounds 3 --out docs/bench/ops_compare.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from peers import peer_env, ratio_table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_json(cmd, path):
    """Runs cmd, which writes JSON to path, at the peers' defaults (peers.py)."""
    subprocess.run(cmd, env=peer_env(), check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return {r["name"]: r for r in json.load(f)["results"]}


def times(rounds, key):
    """Each round's {layer: ms} from its {layer: {key: ms, ...}}."""
    return [{name: row[key] for name, row in r.items()} for r in rounds]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "benchmarks"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=7, help="timings per layer in a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.rounds < 1:
        p.error("--threads, --repeats and --rounds must be positive")
    common = ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    ours, theirs = [], []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "tandem.json"), os.path.join(tmp, "torch.json")
        for r in range(args.rounds):
            ours.append(run_json([os.path.join(args.bin, "bench_ops"), "--ops", "--peer", "none",
                                  "--json", a] + common, a))
            theirs.append(run_json([sys.executable, os.path.join(HERE, "ops_torch.py"), "--json",
                                    b] + common, b))
            done = r + 1
            rate = (time.time() - t0) / done
            print(f"round {done}/{args.rounds} ({rate:.0f} s a round), ETA "
                  f"{rate * (args.rounds - done):.0f} s", flush=True)
    ratio_table(times(ours, "tandem_ms"), times(theirs, "ms"), "layer, f32 forward + backward", 3,
                args)


if __name__ == "__main__":
    main()
