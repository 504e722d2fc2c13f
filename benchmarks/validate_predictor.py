#!/usr/bin/env python3
"""The scaling predictor against measured runs: CPU ranks of the local backend at 1..N, or
(--device cuda) the GPUs of this machine.

1. Measures the local backend's allreduce at world 2 (bench_allreduce) and fits latency and
   bandwidth of the ring model to it (T = 2 x latency + bytes / bandwidth at two ranks).
2. For each world w, in the same minute:
   a. what a one-rank profile cannot know on a shared CPU: how much slower the slowest of w
      ranks computes a step while the others compute beside it. w independent one-rank
      processes (no DDP, no communication) run at once; for each step the slowest process's
      time is taken (ranks in lockstep would wait for it), and the median of those over one
      process alone is the slowdown (unless --cores-model: ranks over cores);
   b. tandem-predict profiles one rank of ResNet-20 (batch 64 of 1x28x28, one thread) and
      predicts the step at w ranks with that slowdown (--compute-scale; --cpu-cores with
      --cores-model): the communication, its buckets and their overlap with backward are the
      predictor's;
   c. bench_scaling measures the step at w ranks (DDP, local backend, one thread each).
With --device cuda, for each world 1..GPUs (--max-world at most): tandem-predict profiles one
rank of ResNet-50 (batch 64 of 3x224x224, f32) on GPU 0 and predicts the step at w GPUs over
--interconnect; bench_scaling measures the step at w GPUs (DDP, nccl). GPUs in one machine do
not slow each other's compute, so no slowdown is measured.
Prints and writes predicted vs measured step times; the target is within 10%.

  python3 benchmarks/validate_predictor.py --max-world 4 --out docs/bench/predictor.json
  python3 benchmarks/validate_predictor.py --device cuda --bin build-gpu/benchmarks --out gpu-out/predictor_gpu.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_scaling import tandem_independent

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(os.path.dirname(HERE), "build", "benchmarks")


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    text = out[out.index("{"):]
    return json.loads(text)


def fit_local(bin_dir):
    """Least-squares T = a + bytes / bw over the sweep's sizes at world 2."""
    path = "/tmp/tandem-validate-allreduce.json"
    subprocess.run([os.path.join(bin_dir, "bench_allreduce"), "--backend", "local", "--world", "2",
                    "--max-mib", "8", "--iters", "30", "--json", path], check=True, capture_output=True)
    rows = json.load(open(path))["sizes"]
    xs = [r["bytes"] for r in rows]
    ys = [r["time_us"] * 1e-6 for r in rows]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = max(my - slope * mx, 0.0)
    return {"latency_us": a / 2 * 1e6, "bandwidth_gbs": 1 / slope / 1e9 if slope > 0 else 1e3}


def independent_runs(bin_dir, world):
    """`world` one-rank processes without DDP at once (bench_scaling.py's ceiling runs, with this
    script's model and batch): the median process step, and the median of the per-step slowest."""
    run = argparse.Namespace(binary=os.path.join(bin_dir, "bench_scaling"), batch=64, threads=1,
                             steps=15, warmup=3, model="resnet20")
    return tandem_independent(world, run)


def gpu_count():
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listing.splitlines())


def validate_gpu(args):
    """Predicted against measured step time at 1..min(GPUs, --max-world) GPUs."""
    worlds = range(1, min(gpu_count(), args.max_world) + 1)
    if not worlds:
        sys.exit("validate_predictor.py --device cuda: nvidia-smi lists no GPU")
    shape = ["--model", "resnet50", "--batch", str(args.gpu_batch), "--size", "224", "--channels", "3"]
    rows = {w: {"world": w, "predicted_runs_ms": [], "measured_runs_ms": []} for w in worlds}
    profiles = []
    for rep in range(args.repeats):
        for w in worlds:
            predicted = run_json([os.path.join(args.bin, "tandem-predict"), "--device", "cuda", "--ranks", str(w),
                                  "--steps", "5", "--interconnect", args.interconnect, "--json"] + shape)
            profiles.append({"world": w} | {k: predicted[k] for k in ("compute_ms", "optimizer_ms", "gradient_mb")})
            m = run_json([os.path.join(args.bin, "bench_scaling"), "--device", "cuda", "--ranks", str(w),
                          "--threads", "2", "--steps", "10", "--warmup", "3"] + shape)["step_ms_median"]
            pred = next(r for r in predicted["per_ranks"] if r["ranks"] == w)["step_ms"]
            rows[w]["predicted_runs_ms"].append(pred)
            rows[w]["measured_runs_ms"].append(m)
            print(f"[{rep + 1}/{args.repeats}] {w} GPU(s): predicted {pred:.1f} ms, measured {m:.1f} ms, "
                  f"ratio {pred / m:.2f}", file=sys.stderr, flush=True)
    return {"device": "cuda", "interconnect": args.interconnect, "batch_per_rank": args.gpu_batch,
            "profiles": profiles, "rows": finish(rows, args.repeats)}


def finish(rows, repeats):
    """The medians of each world's paired runs."""
    for w, r in rows.items():
        r["predicted_step_ms"] = statistics.median(r["predicted_runs_ms"])
        r["measured_step_ms"] = statistics.median(r["measured_runs_ms"])
        r["predicted_over_measured"] = statistics.median(
            p / m for p, m in zip(r["predicted_runs_ms"], r["measured_runs_ms"]))
        print(f"world {w}: predicted / measured {r['predicted_over_measured']:.2f} (median of "
              f"{repeats} paired runs)", file=sys.stderr)
    return list(rows.values())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-world", type=int, default=4)
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--bin", default=BIN)
    p.add_argument("--cores-model", action="store_true",
                   help="predict with --cpu-cores (ranks over cores) instead of measured slowdowns")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--interconnect", default="nvlink-h200", help="--device cuda: tandem-predict's preset")
    p.add_argument("--gpu-batch", type=int, default=64, help="--device cuda: images per GPU")
    p.add_argument("--out")
    args = p.parse_args()
    if args.device == "cuda":
        return emit(validate_gpu(args), args.out)
    link = fit_local(args.bin)
    print(f"local backend at world 2: {link['latency_us']:.0f} us per ring step, "
          f"{link['bandwidth_gbs']:.2f} GB/s", file=sys.stderr)
    # Each repeat measures, for every world size in turn, the slowdown, the prediction and the
    # DDP run one after another, so each prediction meets a run from the same minute of this
    # shared machine.
    rows = {w: {"world": w, "predicted_runs_ms": [], "measured_runs_ms": [], "compute_scale_runs": []}
            for w in range(1, args.max_world + 1)}
    profiles = []
    for rep in range(args.repeats):
        for w in range(1, args.max_world + 1):
            if args.cores_model:
                scale = None
                contention = ["--cpu-cores", str(args.cores)]
            else:
                scale = 1.0
                if w > 1:
                    alone = independent_runs(args.bin, 1)["step_ms_median"]
                    scale = independent_runs(args.bin, w)["lockstep_step_ms_median"] / alone
                # tandem-predict takes slowdowns for 1..w ranks; only the last one is used here.
                contention = ["--compute-scale", ",".join(["1"] * (w - 1) + [f"{scale:.4f}"])]
            predicted = run_json([os.path.join(args.bin, "tandem-predict"), "--model", "resnet20", "--batch", "64",
                                  "--size", "28", "--channels", "1", "--threads", "1", "--device", "cpu",
                                  "--ranks", str(w), "--steps", "15",
                                  "--latency-us", str(link["latency_us"]), "--bandwidth-gbs",
                                  str(link["bandwidth_gbs"]), "--json"] + contention)
            profiles.append({"world": w} | {k: predicted[k] for k in ("compute_ms", "optimizer_ms", "gradient_mb")}
                            | ({"compute_scale": scale} if scale else {}))
            m = run_json([os.path.join(args.bin, "bench_scaling"), "--ranks", str(w), "--batch", "64",
                          "--threads", "1", "--steps", "15", "--warmup", "3",
                          "--model", "resnet20"])["step_ms_median"]
            pred = next(r for r in predicted["per_ranks"] if r["ranks"] == w)["step_ms"]
            rows[w]["predicted_runs_ms"].append(pred)
            rows[w]["measured_runs_ms"].append(m)
            if scale:
                rows[w]["compute_scale_runs"].append(scale)
            print(f"[{rep + 1}/{args.repeats}] world {w}: slowdown {scale or 0:.2f}, predicted {pred:.0f} ms, "
                  f"measured {m:.0f} ms, ratio {pred / m:.2f}", file=sys.stderr, flush=True)
    rows = finish(rows, args.repeats)
    out = {"link": link, "cores": args.cores, "contention": "cores model" if args.cores_model else "measured",
           "profiles": profiles, "rows": rows}
    emit(out, args.out)


def emit(out, path):
    print(json.dumps(out, indent=1))
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
