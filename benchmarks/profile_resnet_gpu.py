#!/usr/bin/env python3
"""Where ResNet-50's GPU time goes, tandem against PyTorch: the last training step of each side
(bench_resnet_gpu.py's two loops, after their warm-up) under Nsight Compute, which times every
kernel alone (gpu__time_duration). Per side it writes: the step's kernel count and the sum of
their times (the GPU work of a step, kernels run one at a time), the wall step time of a run
without the profiler (its excess over the kernel sum is time the GPU waited for the host, or
kernels that ran concurrently), the time per kind of kernel (convolution, batch norm, ...) and
the kernels that took longest, and how long the host took to queue each phase (forward,
backward, optimizer: a step whose queueing takes as long as its wall time is bound by the host).

  python3 benchmarks/profile_resnet_gpu.py --bin build-gpu/benchmarks --out gpu-out/profile.json

--model, --channels, --size, --precision and --layout as bench_resnet_gpu.py's (the main
example's work: --model resnet20 --channels 1 --size 28 --batch 128 --precision f32 --layout nchw).
"""
import argparse
import collections
import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

import bench_resnet_gpu as bench

# The first pattern a kernel's lower-cased name matches names its kind; the order matters.
KINDS = [
    ("layout/cast", r"nchwtonhwc|nhwctonchw|transpose|convert|cast|copy"),
    ("convolution/gemm", r"conv|xmma|gemm|sm90_|sm80_|cutlass|implicit|wgrad|dgrad|fprop|cudnn"),
    ("batch norm", r"batch_?norm|bn_|welford|norm"),
    ("pooling", r"pool"),
    ("loss/reduction", r"softmax|cross|nll|reduce|sum"),
    ("optimizer", r"sgd|momentum|multi_tensor|foreach|adam|fused"),
    ("fill", r"fill|zero|memset"),
    ("elementwise", r"elementwise|vectorized|unrolled|relu|add|mul|threshold"),
]


def kind(name):
    low = name.lower()
    return next((k for k, pattern in KINDS if re.search(pattern, low)), "other")


def find_ncu():
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))
    return candidates[-1] if candidates else None


def profile(ncu, cmd, log, timeout):
    """Runs `cmd` under ncu, collecting only between the program's profiler start and stop; returns
    [(kernel name, ns)] in launch order."""
    subprocess.run([ncu, "--profile-from-start", "off", "--clock-control", "none", "--metrics",
                    "gpu__time_duration.sum", "--csv", "--print-units", "base", "--log-file", log] + cmd,
                   check=True, capture_output=True, timeout=timeout)
    lines = [line for line in open(log) if not line.startswith("==")]
    rows = []
    for r in csv.DictReader(io.StringIO("".join(lines))):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", ""))))
    return rows


def summarize(rows, wall_ms, top):
    by_kind, by_name = collections.defaultdict(float), collections.defaultdict(lambda: [0.0, 0])
    for name, ns in rows:
        by_kind[kind(name)] += ns / 1e6
        by_name[name][0] += ns / 1e6
        by_name[name][1] += 1
    total = sum(ns for _, ns in rows) / 1e6
    return {"kernels": len(rows), "kernel_ms": total, "wall_step_ms": wall_ms,
            "host_bound_ms": wall_ms - total if wall_ms else None,
            "ms_by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "top_kernels": [{"name": n[:200], "ms": v[0], "count": v[1]}
                            for n, v in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build-gpu/benchmarks")
    p.add_argument("--model", default="resnet50", choices=bench.MODELS)
    p.add_argument("--channels", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--layout", default="nhwc", choices=["nhwc", "nchw"])
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--timeout", type=int, default=150, help="seconds for one side under the profiler")
    p.add_argument("--out")
    args = p.parse_args()
    ncu = find_ncu()
    if not ncu:
        sys.exit("profile_resnet_gpu.py: Nsight Compute (ncu) is not on this machine")
    sides = {"tandem": bench.tandem_command, "pytorch": bench.torch_command}
    base = bench.parser().parse_args(
        ["--bin", args.bin, "--model", args.model, "--channels", str(args.channels), "--batch", str(args.batch),
         "--size", str(args.size), "--precision", args.precision, "--layout", args.layout]
        + (["--cudnn-benchmark"] if args.cudnn_benchmark else []))
    # The wall step without the profiler: 10 steps after 5 of warm-up.
    plain = argparse.Namespace(**{**vars(base), "steps": 10, "warmup": 5, "side_timeout": 90})
    walls = {side: bench.run_json(command(plain), 90) for side, command in sides.items()}
    # Under the profiler: 3 steps of warm-up, the fourth collected.
    profiled = argparse.Namespace(**{**vars(base), "steps": 1, "warmup": 3, "profile_last_step": True,
                                     "side_timeout": args.timeout})
    out = {"model": args.model, "batch": args.batch, "size": args.size, "precision": args.precision,
           "layout": args.layout, "cudnn_benchmark": args.cudnn_benchmark, "ncu": ncu, "sides": {}}
    for side, command in sides.items():
        wall = walls[side].get("step_ms_median")
        try:
            rows = profile(ncu, command(profiled), f"/tmp/tandem-profile-{side}.csv", args.timeout)
            out["sides"][side] = summarize(rows, wall, args.top)
            for phase in bench.PhaseTimes.PHASES:  # the host's queueing, plain run
                key = f"host_{phase}_ms_median"
                if key in walls[side]:
                    out["sides"][side][key] = walls[side][key]
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            err = getattr(e, "stderr", b"") or b""
            out["sides"][side] = {"error": f"{e}: {err.decode(errors='replace')[-1500:]}", "wall_step_ms": wall}
        s = out["sides"][side]
        if "kernel_ms" in s:
            print(f"{side}: {s['kernels']} kernels, {s['kernel_ms']:.1f} ms of kernels, wall step "
                  f"{wall or float('nan'):.1f} ms", file=sys.stderr, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    else:
        print(json.dumps(out, indent=1))
    # Last, where a log's tail shows it: ms per kind of kernel, side by side.
    done = {side: s for side, s in out["sides"].items() if "kernel_ms" in s}
    kinds = sorted({k for s in done.values() for k in s["ms_by_kind"]},
                   key=lambda k: -max(s["ms_by_kind"].get(k, 0) for s in done.values()))
    print(f"{'ms of one step':<20}" + "".join(f"{side:>10}" for side in done))
    hosts = [f"host_{phase}_ms_median" for phase in bench.PhaseTimes.PHASES]
    for k in ["wall_step_ms", "kernel_ms"] + hosts + kinds:
        print(f"{k.replace('_median', ''):<20}"
              + "".join(f"{(s.get(k) or s['ms_by_kind'].get(k, 0)):>10.2f}" for s in done.values()))



if __name__ == "__main__":
    main()
