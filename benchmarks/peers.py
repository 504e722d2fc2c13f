"""What the side-by-side benchmark drivers share: each side (tandem's program, PyTorch's worker)
runs in its own process at its own defaults. Nothing here may slow the peer: an
OMP_WAIT_POLICY in the caller's environment is removed (PASSIVE costs PyTorch 10-15% on the
ResNet path). Nor may the peer run on a BLAS slower than the one its package brings:
require_optimized_blas refuses Debian's reference BLAS."""
import argparse
import json
import os
import statistics
import subprocess
import time


def peer_env():
    """The caller's environment without OMP_WAIT_POLICY."""
    return {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}


def run_side(cmd):
    """Runs cmd; returns the JSON object its last line of output prints."""
    out = subprocess.run(cmd, env=peer_env(), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def require_optimized_blas():
    """Exits, saying why, when the PyTorch of this process runs its matmuls on Debian's reference
    BLAS: libtorch1.13 recommends libopenblas0, and without it a 1024^3 product runs at 6 GFLOP/s,
    a peer no user has (scripts/setup.sh --bench installs OpenBLAS). Call after importing torch."""
    with open("/proc/self/maps") as f:
        reference = sorted({line.split()[-1] for line in f if "/blas/libblas.so.3" in line})
    if reference:
        raise SystemExit(f"PyTorch's BLAS is the reference implementation ({reference[0]}), which "
                         "would make a false peer; install libopenblas0 (scripts/setup.sh --bench)")


def sweep_args(doc, bin_dir, repeats, repeats_help):
    """The options of a side-by-side sweep (--bin, --threads, --repeats, --rounds, --out), parsed
    and checked; the description is doc's first line."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--bin", default=bin_dir)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.rounds < 1:
        p.error("--threads, --repeats and --rounds must be positive")
    return args


def alternate_rounds(rounds, ours, theirs):
    """Calls ours() then theirs() `rounds` times, printing each round's rate and the ETA; returns
    the lists of their results."""
    mine, peer = [], []
    t0 = time.time()
    for r in range(rounds):
        mine.append(ours())
        peer.append(theirs())
        rate = (time.time() - t0) / (r + 1)
        print(f"round {r + 1}/{rounds} ({rate:.0f} s a round), ETA "
              f"{rate * (rounds - r - 1):.0f} s", flush=True)
    return mine, peer


def ratio_table(ours, theirs, what, digits, args):
    """The rows of a side-by-side sweep from rounds of per-name times in ms (ours[r][name],
    theirs[r][name]): each side's median over the rounds and the median of the per-round ratios
    (tandem / PyTorch). Prints them as a table (rows at 1.5x or more marked) under a header naming
    `what`, and writes them with args.threads/repeats/rounds to args.out where given."""
    rows = []
    for name in ours[0]:
        if name not in theirs[0]:
            continue
        t = [o[name] for o in ours]
        q = [x[name] for x in theirs]
        rows.append({"name": name, "tandem_ms": statistics.median(t),
                     "pytorch_ms": statistics.median(q),
                     "ratio": statistics.median(a / b for a, b in zip(t, q)),
                     "tandem_rounds_ms": t, "pytorch_rounds_ms": q})
    print(f"\n| {what} | tandem ms | PyTorch ms | tandem / PyTorch |")
    print("|---|---:|---:|---:|")
    for r in rows:
        mark = " **<==**" if r["ratio"] >= 1.5 else ""
        print(f"| {r['name']} | {r['tandem_ms']:.{digits}f} | {r['pytorch_ms']:.{digits}f} | "
              f"{r['ratio']:.2f}{mark} |")
    print(f"\n{args.threads} threads; medians of {args.rounds} rounds, each a median of "
          f"{args.repeats}; ratio = median of the per-round ratios")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"threads": args.threads, "repeats": args.repeats, "rounds": args.rounds,
                       "rows": rows}, f, indent=1)
        print("wrote", args.out)
    return rows


class PhaseTimes:
    """How long the host took over each phase of a training step, as bench_resnet reports it
    (host_*_ms_median): forward, backward and optimizer, each from the end of the one before. On
    a GPU the time to queue it (the host runs ahead), on the CPU its work."""
    PHASES = ("forward", "backward", "optimizer")

    def __init__(self):
        self.ms = {p: [] for p in self.PHASES}

    def add(self, start, *ends):
        """One step: its start and the end of each phase, in order (time.perf_counter())."""
        for phase, a, b in zip(self.PHASES, (start,) + ends, ends):
            self.ms[phase].append((b - a) * 1000)

    def medians(self):
        return {f"host_{p}_ms_median": statistics.median(v) for p, v in self.ms.items()}
