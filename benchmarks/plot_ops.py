#!/usr/bin/python3
"""Summarizes one or more bench_ops JSON files (median per case across files) as a Markdown table
and a plot: tandem's time over libtorch's per case (below 1: tandem faster), and the GFLOP/s of
both against the measured FMA peak.
Usage: /usr/bin/python3 benchmarks/plot_ops.py OUT.png RUN1.json [RUN2.json ...]"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

dst, srcs = sys.argv[1], sys.argv[2:]
runs = [json.load(open(s)) for s in srcs]
names = [r["name"] for r in runs[0]["results"] if "libtorch_ms" in r]


def med(name, key):
    vals = [r[key] for run in runs for r in run["results"] if r["name"] == name and key in r]
    return statistics.median(vals)


# The peak is a maximum by nature: a disturbed probe only reads low, so take the best run.
peak = max(run["peak_gflops"] for run in runs)
ratios = [med(n, "ratio_tandem_over_libtorch") for n in names]
ours = [med(n, "tandem_gflops") for n in names]
theirs = [med(n, "gflop") / (med(n, "libtorch_ms") / 1e3) for n in names]

print(f"measured FMA peak (best of {len(runs)} runs): {peak:.0f} GFLOP/s\n")
print("| case | tandem ms | tandem GFLOP/s | libtorch ms | libtorch GFLOP/s | tandem / libtorch time |")
print("|---|---:|---:|---:|---:|---:|")
for n, o, t, r in zip(names, ours, theirs, ratios):
    print(f"| {n} | {med(n, 'tandem_ms'):.2f} | {o:.0f} | {med(n, 'libtorch_ms'):.2f} | {t:.0f} | {r:.2f} |")
steady = [n for n in names if any("steady_gflops" in r for run in runs for r in run["results"] if r["name"] == n)]
for n in steady:
    print(f"\n{n}, steady state (back-to-back calls): {med(n, 'steady_gflops'):.0f} GFLOP/s = "
          f"{100 * med(n, 'steady_gflops') / peak:.0f}% of the measured peak; alternating with "
          f"libtorch: {med(n, 'tandem_gflops'):.0f} GFLOP/s = {100 * med(n, 'tandem_gflops') / peak:.0f}%")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 0.45 * len(names) + 2), sharey=True)
y = range(len(names))
ax1.barh(y, ratios, color=["tab:green" if r <= 1 else "tab:red" for r in ratios])
ax1.axvline(1.0, color="black", lw=1)
ax1.set_xscale("log")
ax1.set_yticks(list(y), names)
ax1.invert_yaxis()
ax1.set_xlabel("tandem time / libtorch time (log; < 1: tandem faster)")
for i, r in enumerate(ratios):
    ax1.text(r, i, f" {r:.2f}", va="center")
h = 0.4
ax2.barh([i - h / 2 for i in y], ours, h, label="tandem")
ax2.barh([i + h / 2 for i in y], theirs, h, label="libtorch 1.13 (Debian)")
ax2.axvline(peak, color="black", ls="--", lw=1, label="measured FMA peak")
ax2.set_xlabel("GFLOP/s")
ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
fig.suptitle(f"bench_ops, {runs[0]['threads']} threads: median over {len(runs)} runs of "
             f"{runs[0]['repeats']} alternating repeats each")
fig.tight_layout()
fig.savefig(dst, dpi=110)
print("\nwrote", dst)
