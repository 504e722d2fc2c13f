#!/usr/bin/python3
"""The main example end to end, tandem against PyTorch 1.13, side by side.

Each repeat runs `tandem-resnet` (build/examples) and benchmarks/train_resnet_torch.py (the same
work written in PyTorch: real Fashion-MNIST, per-sample crop and flip in one loader worker, the
same model, optimizer and schedule, evaluation on the test set) with the same --epochs and
--max-steps, each in its own process at its own defaults, alternating. Measures per process: wall
time from start to exit (loading, training, evaluation, tandem's checkpoint), the training loop's
img/s, test accuracy and peak memory: the kernel's maxrss of the process, and the peak
proportional set size of the process and its children (PyTorch's loader workers are processes). Writes
medians and the ratios as JSON. With --device cuda both train on the GPU (tandem: batches
augmented on the GPU; PyTorch: per-sample transforms in the loader's workers, pinned batches) and
each side's peak GPU memory is recorded too (tandem's allocator, torch.cuda.max_memory_allocated).

  /usr/bin/python3 benchmarks/bench_example.py --max-steps 100 --repeats 5 --out example.json
  python3 benchmarks/bench_example.py --device cuda --binary build-gpu/examples/tandem-resnet \
      --data-dir DIR --epochs 1 --max-steps 300 --workers 4 --repeats 2
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def tree_pss_mb(root):
    """Proportional set size (shared pages split among their sharers) of root and every process
    below it, in MB: PyTorch's loader workers are processes, tandem's are threads."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total / 1024.0


def measure(cmd, env):
    """Runs cmd; returns (stdout, wall seconds, peak RSS of the process in MB (the kernel's
    maxrss), peak PSS of its process tree in MB (sampled 10 times a second))."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    chunks, peak_tree = [], 0.0
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()))
    reader.start()
    while reader.is_alive():
        peak_tree = max(peak_tree, tree_pss_mb(proc.pid))
        reader.join(0.1)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = "".join(chunks)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({proc.returncode}):\n{out[-3000:]}")
    return out, wall, usage.ru_maxrss / 1024.0, peak_tree


def common_args(args):
    """What both sides are given alike."""
    out = ["--epochs", str(args.epochs), "--precision", args.precision, "--device", args.device,
           "--workers", str(args.workers)]
    if args.data_dir:
        out += ["--data-dir", args.data_dir]
    return out


def run_tandem(args, env, workdir):
    cmd = [args.binary, "--checkpoint-dir", workdir] + common_args(args)
    if args.device == "cuda":
        cmd += ["--ranks", "1"]  # one GPU, as the PyTorch script's
    if args.max_steps:
        cmd += ["--max-steps", str(args.max_steps)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    out, wall, rss, tree = measure(cmd, env)
    m = re.search(r"done: .* (\d+) steps, test accuracy ([\d.]+)%, ([\d.]+) s training \(([\d.]+) img/s[;)]", out)
    if not m:
        sys.exit(f"unexpected tandem-resnet output:\n{out[-2000:]}")
    r = {"steps": int(m[1]), "test_acc": float(m[2]) / 100, "train_seconds": float(m[3]),
         "train_img_per_s": float(m[4]), "wall_seconds": wall, "peak_rss_mb": rss,
         "peak_tree_pss_mb": tree}
    gpu = re.search(r"GPU memory \(cuda:0\): peak .*?\((\d+) bytes\) allocated", out)
    if args.device == "cuda":
        if not gpu:
            sys.exit(f"tandem-resnet printed no GPU memory line:\n{out[-2000:]}")
        r["gpu_peak_allocated_bytes"] = int(gpu[1])
    return r


def run_torch(args, env):
    cmd = [sys.executable, os.path.join(HERE, "train_resnet_torch.py")] + common_args(args)
    if args.max_steps:
        cmd += ["--max-steps", str(args.max_steps)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    out, wall, rss, tree = measure(cmd, env)
    r = json.loads(out.strip().splitlines()[-1])
    r.update(wall_seconds=wall, peak_rss_mb=rss, peak_tree_pss_mb=tree)
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=100, help="0: the whole run")
    # tandem's default is every core; PyTorch 1.13's is the physical cores, 1 on this 2-vCPU
    # machine: both get the same count, as a user comparing them would set it.
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="compute threads for both (default: every core; 0: each its own default)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                   help="bf16: autocast on both sides")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: both on one GPU")
    p.add_argument("--workers", type=int, default=1, help="data loader workers of both")
    p.add_argument("--data-dir", help="Fashion-MNIST's gzip files (default: each side's own default)")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "examples", "tandem-resnet"))
    p.add_argument("--out", help="JSON file to write")
    args = p.parse_args()

    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)  # every peer at its own defaults
    runs = []
    start = time.time()
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.repeats):
            t = run_tandem(args, env, workdir)
            pt = run_torch(args, env)
            runs.append({"tandem": t, "pytorch": pt,
                         "wall_ratio": pt["wall_seconds"] / t["wall_seconds"],
                         "train_ratio": t["train_img_per_s"] / pt["train_img_per_s"],
                         "rss_ratio": t["peak_rss_mb"] / pt["peak_rss_mb"],
                         "tree_pss_ratio": t["peak_tree_pss_mb"] / pt["peak_tree_pss_mb"]})
            if args.device == "cuda":
                runs[-1]["gpu_memory_ratio"] = (t["gpu_peak_allocated_bytes"] /
                                                pt["gpu_peak_allocated_bytes"])
            elapsed = time.time() - start
            eta = elapsed / (r + 1) * (args.repeats - r - 1)
            print(f"[{r + 1}/{args.repeats}] wall: tandem {t['wall_seconds']:.1f} s, PyTorch "
                  f"{pt['wall_seconds']:.1f} s (speed ratio {runs[-1]['wall_ratio']:.2f}) | "
                  f"peak RSS {t['peak_rss_mb']:.0f} / {pt['peak_rss_mb']:.0f} MB, with loader "
                  f"processes (PSS) {t['peak_tree_pss_mb']:.0f} / {pt['peak_tree_pss_mb']:.0f} MB | "
                  f"acc {100 * t['test_acc']:.2f} / {100 * pt['test_acc']:.2f}% | "
                  f"{elapsed:.0f} s, ETA {eta:.0f} s", file=sys.stderr, flush=True)
    med = lambda key, side=None: statistics.median(r[side][key] if side else r[key] for r in runs)
    summary = {
        "device": args.device, "workers": args.workers,
        "epochs": args.epochs, "max_steps": args.max_steps, "precision": args.precision, "threads": args.threads or "defaults",
        "repeats": args.repeats, "pytorch_version": runs[0]["pytorch"]["version"],
        "tandem_wall_s_median": med("wall_seconds", "tandem"),
        "pytorch_wall_s_median": med("wall_seconds", "pytorch"),
        "wall_speed_ratio_median": med("wall_ratio"),
        "tandem_train_img_per_s_median": med("train_img_per_s", "tandem"),
        "pytorch_train_img_per_s_median": med("train_img_per_s", "pytorch"),
        "train_speed_ratio_median": med("train_ratio"),
        "tandem_peak_rss_mb_median": med("peak_rss_mb", "tandem"),
        "pytorch_peak_rss_mb_median": med("peak_rss_mb", "pytorch"),
        "rss_ratio_median": med("rss_ratio"),
        "tandem_peak_tree_pss_mb_median": med("peak_tree_pss_mb", "tandem"),
        "pytorch_peak_tree_pss_mb_median": med("peak_tree_pss_mb", "pytorch"),
        "tree_pss_ratio_median": med("tree_pss_ratio"),
    }
    if args.device == "cuda":
        summary.update(tandem_gpu_peak_allocated_bytes_median=med("gpu_peak_allocated_bytes", "tandem"),
                       pytorch_gpu_peak_allocated_bytes_median=med("gpu_peak_allocated_bytes", "pytorch"),
                       gpu_memory_ratio_median=med("gpu_memory_ratio"))
    summary["runs"] = runs
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
