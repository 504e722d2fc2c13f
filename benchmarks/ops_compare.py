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
import json
import os
import subprocess
import sys
import tempfile

from peers import alternate_rounds, peer_env, ratio_table, sweep_args

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
    args = sweep_args(__doc__, os.path.join(ROOT, "build", "benchmarks"), 7,
                      "timings per layer in a round")
    common = ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "tandem.json"), os.path.join(tmp, "torch.json")
        ours, theirs = alternate_rounds(
            args.rounds,
            lambda: run_json([os.path.join(args.bin, "bench_ops"), "--ops", "--peer", "none",
                              "--json", a] + common, a),
            lambda: run_json([sys.executable, os.path.join(HERE, "ops_torch.py"), "--json", b] +
                             common, b))
    ratio_table(times(ours, "tandem_ms"), times(theirs, "ms"), "layer, f32 forward + backward", 3,
                args)

if __name__ == "__main__":
    main()
