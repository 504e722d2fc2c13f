#!/usr/bin/python3
"""Allreduce sweep: tandem's local backend (threads), tandem's mpi backend (processes) and Open
MPI's own MPI_Allreduce, same machine, same sizes (8 B ... 256 MiB of f32), same rank count;
repeats alternate between the three, and the JSON holds the per-size medians, the local/MPI ratio
and the machine's memcpy bandwidth.

  python3 benchmarks/bench_allreduce.py --world 2 --repeats 3 \\
      --out docs/bench/allreduce_w2.json --plot docs/bench/allreduce_w2.png
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "benchmarks")


def mpirun(args):
    cmd = ["mpirun", "-np", str(args.world), "--oversubscribe"]
    return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def tandem_sweep(args, backend):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [os.path.join(BIN, "bench_allreduce"), "--backend", backend, "--world",
               str(args.world), "--max-mib", str(args.max_mib), "--json", f.name]
        subprocess.run((mpirun(args) if backend == "mpi" else []) + cmd, check=True,
                       capture_output=True)
        return json.load(open(f.name))


def mpi_sweep(args):
    out = subprocess.run(mpirun(args) + [os.path.join(BIN, "bench_mpi_allreduce"), str(args.max_mib)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--max-mib", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--plot")
    args = p.parse_args()
    local, tandem_mpi, mpi = [], [], []
    start = time.time()
    for r in range(args.repeats):
        local.append(tandem_sweep(args, "local"))
        tandem_mpi.append(tandem_sweep(args, "mpi"))
        mpi.append(mpi_sweep(args))
        elapsed = time.time() - start
        print(f"[{r + 1}/{args.repeats}] {elapsed:.0f} s, ETA {elapsed / (r + 1) * (args.repeats - r - 1):.0f} s",
              file=sys.stderr)
    rows = []
    for i, size in enumerate(local[0]["sizes"]):
        t_local = statistics.median(run["sizes"][i]["time_us"] for run in local)
        t_mpi = statistics.median(run["sizes"][i]["time_us"] for run in mpi)
        t_tmpi = statistics.median(run["sizes"][i]["time_us"] for run in tandem_mpi)
        b = size["bytes"]
        rows.append({"bytes": b, "local_time_us": t_local, "mpi_time_us": t_mpi,
                     "tandem_mpi_time_us": t_tmpi, "tandem_mpi_algbw_gbps": b / t_tmpi / 1e3,
                     "local_algbw_gbps": b / t_local / 1e3, "mpi_algbw_gbps": b / t_mpi / 1e3,
                     "local_busbw_gbps": b / t_local / 1e3 * 2 * (args.world - 1) / args.world,
                     "ratio": t_mpi / t_local})
    memcpy = statistics.median(run["memcpy_gbps"] for run in local)
    summary = {"world": args.world, "dtype": "f32", "repeats": args.repeats, "memcpy_gbps": memcpy,
               "sizes": rows}
    print(f"{'bytes':>12} {'local GB/s':>11} {'tandem-mpi GB/s':>16} {'MPI GB/s':>9} {'local/MPI':>10}")
    for row in rows:
        print(f"{row['bytes']:>12} {row['local_algbw_gbps']:>11.3f} {row['tandem_mpi_algbw_gbps']:>16.3f} "
              f"{row['mpi_algbw_gbps']:>9.3f} {row['ratio']:>10.2f}")
    print(f"memcpy (1 thread): {memcpy:.2f} GB/s")
    if args.out:
        json.dump(summary, open(args.out, "w"), indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        xs = [row["bytes"] for row in rows]
        ax.loglog(xs, [row["local_algbw_gbps"] for row in rows], "o-", label="tandem local")
        ax.loglog(xs, [row["tandem_mpi_algbw_gbps"] for row in rows], "^-", label="tandem mpi backend")
        ax.loglog(xs, [row["mpi_algbw_gbps"] for row in rows], "s-", label="Open MPI MPI_Allreduce")
        ax.axhline(memcpy, color="gray", ls=":", label=f"memcpy {memcpy:.1f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes, f32)")
        ax.set_ylabel("algorithm bandwidth (GB/s)")
        ax.set_title(f"allreduce, {args.world} ranks, median of {args.repeats}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
