#!/usr/bin/python3
"""Draws a window of a tandem Chrome trace (tandem-resnet --trace FILE) as a PNG: one band per
rank and row (compute: data wait, forward, backward, allreduce wait, optimizer; communication:
each bucket's allreduce; on GPUs, GPU and GPU communication: the phases and allreduces as the
device ran them), so the overlap of communication with backward shows at a glance.

  /usr/bin/python3 benchmarks/plot_trace.py trace.json --steps 3 --out trace.png
"""
import argparse
import json
import os
import sys

COLORS = {"data wait": "tab:gray", "forward": "tab:blue", "backward": "tab:green",
          "allreduce wait": "tab:red", "optimizer": "tab:purple",
          "compute": "tab:cyan", "exposed communication": "tab:red"}  # the GPU row's phases
ROWS = ((0, "compute"), (1, "communication"), (2, "GPU"), (3, "GPU communication"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps to show (from --skip)")
    p.add_argument("--skip", type=int, default=2, help="steps to leave out at the start (warm-up)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    ranks = sorted({e["pid"] for e in events})
    # The window: from the start of step `skip` to the end of step skip + steps, on rank 0.
    host = [e for e in events if e["pid"] == ranks[0] and e["tid"] == 0]  # the host's phases
    opt = sorted((e for e in host if e["name"] == "optimizer"), key=lambda e: e["ts"])
    fwd = sorted((e for e in host if e["name"] == "forward"), key=lambda e: e["ts"])
    first = min(args.skip, len(opt) - 1)
    last = min(first + args.steps, len(opt)) - 1
    t0 = fwd[first]["ts"] if first < len(fwd) else opt[first]["ts"]
    t1 = opt[last]["ts"] + opt[last]["dur"]

    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib missing: no plot {args.out}", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.9 * len(ranks)))
    labels, y, drawn = [], 0, set()
    for r in ranks:
        for tid, row in ROWS:
            if tid >= 2 and not any(e["pid"] == r and e["tid"] == tid for e in events):
                continue  # a CPU rank: no GPU rows
            for e in events:
                if e["pid"] != r or e["tid"] != tid or e["ts"] + e["dur"] < t0 or e["ts"] > t1:
                    continue
                name = e["name"]
                color = COLORS.get(name, "tab:orange")
                drawn.add(name if name in COLORS else "allreduce (a bucket)")
                ax.barh(y, e["dur"] / 1000, left=(e["ts"] - t0) / 1000, height=0.7, color=color,
                        edgecolor="black", linewidth=0.3)
            labels.append(f"rank {r} {row}")
            y += 1
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    names = [n for n in list(COLORS) + ["allreduce (a bucket)"] if n in drawn]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS.get(n, "tab:orange")) for n in names]
    ax.legend(handles, names, ncol=6, fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(ranks) < 3 else -0.2))
    ax.set_title(f"{os.path.basename(args.trace)}: steps {first + 1}..{last + 1}")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
