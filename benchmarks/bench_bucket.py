#!/usr/bin/env python3
"""--bucket-mb auto against fixed bucket caps: DDP step time on CPU ranks (bench_scaling).

Runs bench_scaling at every cap and with auto (the scaling predictor's choice from the first
step's gradient-ready times and the communicator's measured link), alternating the settings
within each repeat so that all see the same machine load, and quotes medians of the repeats:
step time, the part of it that is exposed communication, and the cap auto chose.

  /usr/bin/python3 benchmarks/bench_bucket.py --repeats 3 --out docs/bench/bucket.json \\
      --plot docs/bench/bucket.png
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(os.path.dirname(HERE), "build", "benchmarks", "bench_scaling")


def run(args, cap):
    cmd = [args.binary, "--model", args.model, "--channels", "3", "--size", str(args.size),
           "--batch", str(args.batch), "--ranks", str(args.ranks), "--threads", "1",
           "--steps", str(args.steps), "--warmup", "2", "--bucket-mb", cap]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=4, help="images per rank per step")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--caps", default="1,5,25,100", help="fixed caps, MiB")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--binary", default=BIN)
    p.add_argument("--out")
    p.add_argument("--plot")
    args = p.parse_args()
    settings = args.caps.split(",") + ["auto"]
    runs = {s: [] for s in settings}
    for rep in range(args.repeats):
        for s in settings:
            r = run(args, s)
            runs[s].append(r)
            print(f"[{rep + 1}/{args.repeats}] cap {s}: step {r['step_ms_median']:.1f} ms, exposed "
                  f"communication {r['exposed_comm_ms_median']:.1f} ms (cap {r['bucket_mb']:g} MiB)",
                  file=sys.stderr)
    rows = []
    for s in settings:
        med = lambda k: statistics.median(r[k] for r in runs[s])
        rows.append({"cap": s, "step_ms": med("step_ms_median"), "exposed_ms": med("exposed_comm_ms_median"),
                     "chosen_mb": [r["bucket_mb"] for r in runs[s]]})
        print(f"cap {s:>5}: step {rows[-1]['step_ms']:.1f} ms, exposed {rows[-1]['exposed_ms']:.1f} ms",
              file=sys.stderr)
    out = {"model": args.model, "size": args.size, "batch_per_rank": args.batch, "ranks": args.ranks,
           "rows": rows, "runs": runs}
    print(json.dumps({"rows": rows}, indent=1))
    if args.out:
        json.dump(out, open(args.out, "w"), indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = [f"{r['cap']} MiB" if r["cap"] != "auto" else "auto\n(" + "/".join(f"{c:g}" for c in r["chosen_mb"]) + ")"
                 for r in rows]
        exposed = [r["exposed_ms"] for r in rows]
        rest = [r["step_ms"] - r["exposed_ms"] for r in rows]
        ax.bar(names, rest, color="tab:blue", label="compute and optimizer")
        ax.bar(names, exposed, bottom=rest, color="tab:red", label="exposed communication")
        ax.set(ylabel="ms per step (median)",
               title=f"{args.model}, {args.ranks} CPU ranks, batch {args.batch} per rank: bucket cap")
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
