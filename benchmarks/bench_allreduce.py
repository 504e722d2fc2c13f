#!/usr/bin/python3
"""Allreduce sweep. On the CPU (default): tandem's local backend (threads), tandem's mpi backend
(processes) and Open MPI's own MPI_Allreduce, same machine, same sizes (8 B ... 256 MiB of f32),
same rank count; repeats alternate between the three, and the JSON holds the per-size medians,
the local/MPI ratio and the machine's memcpy bandwidth. With --gpu: tandem's nccl backend against
raw NCCL on every visible GPU, alternating; the JSON holds both bus bandwidths and tandem's
fraction of raw NCCL's.

  python3 benchmarks/bench_allreduce.py --world 2 --repeats 3 \\
      --out docs/bench/allreduce_w2.json --plot docs/bench/allreduce_w2.png
  python3 benchmarks/bench_allreduce.py --gpu --repeats 5 --bin build-gpu/benchmarks \\
      --out docs/bench/allreduce_nccl.json --plot docs/bench/allreduce_nccl.png
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


def run_tool(cmd):
    """Runs a benchmark program; when it fails, shows its error and stops."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    return proc.stdout


def progress(done, total, start):
    elapsed = time.time() - start
    print(f"[{done}/{total}] {elapsed:.0f} s, ETA {elapsed / done * (total - done):.0f} s",
          file=sys.stderr)


def plot(path, rows, series, title, ylabel, hline=None):
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib missing: no plot {path}", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    xs = [row["bytes"] for row in rows]
    for key, marker, label in series:
        ax.loglog(xs, [max(row[key], 1e-6) for row in rows], marker, label=label)
    if hline:
        ax.axhline(hline[0], color="gray", ls=":", label=hline[1])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes, f32)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def mpirun(args):
    cmd = ["mpirun", "-np", str(args.world), "--oversubscribe"]
    return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def tandem_sweep(args, backend):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [os.path.join(args.bin, "bench_allreduce"), "--backend", backend,
               "--max-mib", str(args.max_mib), "--json", f.name]
        cmd += ["--world", str(args.world)] if backend != "nccl" else []
        run_tool((mpirun(args) if backend == "mpi" else []) + cmd)
        return json.load(open(f.name))


def mpi_sweep(args):
    out = run_tool(mpirun(args) + [os.path.join(args.bin, "bench_mpi_allreduce"), str(args.max_mib)])
    return json.loads(out.strip().splitlines()[-1])


def raw_nccl_sweep(args):
    out = run_tool([os.path.join(args.bin, "bench_nccl_allreduce"), str(args.max_mib)])
    return json.loads(out.strip().splitlines()[-1])


def gpu_rows(tandem, raw):
    """Per size: the medians of each side's time per call, bandwidths and tandem's fraction."""
    world = raw[0]["world"]
    factor = 2 * (world - 1) / world
    rows = []
    for i, size in enumerate(raw[0]["sizes"]):
        b = size["bytes"]
        t_tandem = statistics.median(run["sizes"][i]["time_us"] for run in tandem)
        t_raw = statistics.median(run["sizes"][i]["time_us"] for run in raw)
        rows.append({"bytes": b, "tandem_time_us": t_tandem, "raw_time_us": t_raw,
                     "tandem_algbw_gbps": b / t_tandem / 1e3, "raw_algbw_gbps": b / t_raw / 1e3,
                     "tandem_busbw_gbps": b / t_tandem / 1e3 * factor,
                     "raw_busbw_gbps": b / t_raw / 1e3 * factor,
                     "fraction_of_raw": t_raw / t_tandem})
    return world, rows


def gpu_main(args):
    """tandem's nccl backend vs raw NCCL, every visible GPU, alternating."""
    tandem, raw = [], []
    start = time.time()
    for r in range(args.repeats):
        tandem.append(tandem_sweep(args, "nccl"))
        raw.append(raw_nccl_sweep(args))
        progress(r + 1, args.repeats, start)
        world, rows = gpu_rows(tandem, raw)
        summary = {"backend": "nccl", "world": world, "dtype": "f32", "repeats": r + 1, "sizes": rows}
        if world == 1:  # NCCL returns an in-place reduction of one rank without moving a byte
            summary["note"] = ("one rank: NCCL moves no data, so each time is the call's overhead "
                               "and the bandwidths mean nothing")
        if args.out:  # after every repeat: a later time limit loses nothing
            json.dump(summary, open(args.out, "w"), indent=1)
    if world == 1:
        print(summary["note"])
    print(f"{'bytes':>12} {'tandem us':>10} {'raw us':>10} {'tandem busbw':>13} {'raw busbw':>10} {'fraction':>9}")
    for row in rows:
        print(f"{row['bytes']:>12} {row['tandem_time_us']:>10.1f} {row['raw_time_us']:>10.1f} "
              f"{row['tandem_busbw_gbps']:>13.2f} {row['raw_busbw_gbps']:>10.2f} {row['fraction_of_raw']:>9.3f}")
    if args.plot and world > 1:
        plot(args.plot, rows, [("tandem_busbw_gbps", "o-", "tandem nccl backend"),
                               ("raw_busbw_gbps", "s-", "raw NCCL")],
             f"allreduce, {world} GPU(s), median of {args.repeats}", "bus bandwidth (GB/s)")
    elif args.plot:  # one rank: the time per call, tandem's overhead against NCCL's
        plot(args.plot, rows, [("tandem_time_us", "o-", "tandem nccl backend"),
                               ("raw_time_us", "s-", "raw NCCL")],
             f"allreduce at one rank (no data moved), median of {args.repeats}",
             "time per call (us)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--max-mib", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--plot")
    p.add_argument("--gpu", action="store_true", help="tandem nccl vs raw NCCL on every visible GPU")
    p.add_argument("--bin", default=BIN, help="the folder holding the benchmark programs")
    args = p.parse_args()
    if args.gpu:
        return gpu_main(args)
    local, tandem_mpi, mpi = [], [], []
    start = time.time()
    for r in range(args.repeats):
        local.append(tandem_sweep(args, "local"))
        tandem_mpi.append(tandem_sweep(args, "mpi"))
        mpi.append(mpi_sweep(args))
        progress(r + 1, args.repeats, start)
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
        plot(args.plot, rows, [("local_algbw_gbps", "o-", "tandem local"),
                               ("tandem_mpi_algbw_gbps", "^-", "tandem mpi backend"),
                               ("mpi_algbw_gbps", "s-", "Open MPI MPI_Allreduce")],
             f"allreduce, {args.world} ranks, median of {args.repeats}",
             "algorithm bandwidth (GB/s)", (memcpy, f"memcpy {memcpy:.1f} GB/s"))


if __name__ == "__main__":
    main()
