#!/usr/bin/python3
"""ResNet training speed, tandem against PyTorch 1.13 (Debian's python3-torch), side by side.

Each repeat runs the same training loop (forward, cross-entropy, backward, SGD with Nesterov
momentum, or Adam, RMSprop or Adagrad with --optimizer, and weight decay on random in-memory batches; same model,
batch and threads) once in
tandem (build/benchmarks/bench_resnet) and once in PyTorch, each in its own process at its own
defaults (an OMP_WAIT_POLICY in the caller's environment is removed), alternating so that both
see the same machine load. Writes medians and the ratio as JSON.

  /usr/bin/python3 benchmarks/bench_resnet.py --out docs/bench/resnet.json [--repeats 5] \
      [--plot docs/bench/resnet.png]
"""
import argparse
import json
import os
import statistics
import sys
import time

from peers import PhaseTimes, require_optimized_blas, run_side

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_worker(args):
    """The PyTorch side: the CIFAR ResNet of tests/golden/make_model_golden.py (the model the
    golden test checks tandem's against), or torchvision's ResNet-50 layout (bench_resnet_gpu.py)."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
    from make_model_golden import CifarResNet

    require_optimized_blas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "resnet50":
        from bench_resnet_gpu import torch_resnet50
        model = torch_resnet50()
    else:
        model = CifarResNet(int(args.model.replace("resnet", "")), in_channels=args.channels)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "adam":
        opt = torch.optim.Adam(groups, lr=1e-3)
    elif args.optimizer == "rmsprop":
        opt = torch.optim.RMSprop(groups, lr=1e-3)
    elif args.optimizer == "adagrad":
        opt = torch.optim.Adagrad(groups, lr=1e-2)
    else:
        opt = torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True)
    xs = [torch.randn(args.batch, args.channels, args.size, args.size) for _ in range(4)]
    ys = [torch.randint(0, 10, (args.batch,)) for _ in range(4)]
    ms = []
    phases = PhaseTimes()
    low = args.precision == "bf16"
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            loss = F.cross_entropy(model(xs[s % 4]), ys[s % 4])
        t_forward = time.perf_counter()
        loss.backward()
        t_backward = time.perf_counter()
        opt.step()
        t_step = time.perf_counter()
        loss.item()
        if s >= args.warmup:
            ms.append((time.perf_counter() - t0) * 1000)
            phases.add(t0, t_forward, t_backward, t_step)
    median = statistics.median(ms)
    print(json.dumps({"framework": "pytorch", "version": torch.__version__, "model": args.model,
                      "batch": args.batch, "threads": args.threads, "steps": args.steps,
                      "precision": args.precision, "optimizer": args.optimizer, "step_ms_median": median, "img_per_s": args.batch * 1000 / median,
                      **phases.medians()}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet20",
                   choices=["resnet20", "resnet32", "resnet44", "resnet56", "resnet50"],
                   help="resnet50: ImageNet's layout, 3 input channels (use --channels 3)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--size", type=int, default=28)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                   help="bf16: both sides under CPU autocast to bf16")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "rmsprop", "adagrad"],
                   help="sgd: Nesterov momentum 0.9, lr 0.05; adam, rmsprop: lr 1e-3; adagrad: lr 1e-2 "
                        "(weight decay groups alike)")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "bench_resnet"))
    p.add_argument("--out", help="JSON file to write")
    p.add_argument("--plot", help="PNG of img/s per repeat (needs python3-matplotlib)")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.model == "resnet50" and args.channels != 3:
        p.error("resnet50 takes 3 input channels: add --channels 3")
    if args.torch_worker:
        return torch_worker(args)

    # Each side runs in its own process at its own defaults (peers.run_side).
    common = ["--model", args.model, "--batch", str(args.batch), "--channels", str(args.channels),
              "--size", str(args.size), "--threads", str(args.threads), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--precision", args.precision, "--optimizer", args.optimizer]
    runs = []
    start = time.time()
    for r in range(args.repeats):
        t = run_side([args.binary] + common)
        pt = run_side([sys.executable, os.path.abspath(__file__), "--torch-worker"] + common)
        runs.append({"tandem": t, "pytorch": pt, "ratio": t["img_per_s"] / pt["img_per_s"]})
        elapsed = time.time() - start
        eta = elapsed / (r + 1) * (args.repeats - r - 1)
        print(f"[{r + 1}/{args.repeats}] tandem {t['img_per_s']:.0f} img/s, PyTorch "
              f"{pt['img_per_s']:.0f} img/s, ratio {runs[-1]['ratio']:.2f} | "
              f"{elapsed:.0f} s, ETA {eta:.0f} s", file=sys.stderr)
    summary = {
        "model": args.model, "batch": args.batch, "input": [args.channels, args.size, args.size],
        "threads": args.threads, "steps": args.steps, "repeats": args.repeats,
        "precision": args.precision, "optimizer": args.optimizer,
        "pytorch_version": runs[0]["pytorch"]["version"],
        "tandem_img_per_s_median": statistics.median(r["tandem"]["img_per_s"] for r in runs),
        "pytorch_img_per_s_median": statistics.median(r["pytorch"]["img_per_s"] for r in runs),
        "ratio_median": statistics.median(r["ratio"] for r in runs),
        # On the CPU each phase's time is its work: tandem's time / PyTorch's, per phase.
        **{f"{p}_time_ratio_median": statistics.median(
            r["tandem"][f"host_{p}_ms_median"] / r["pytorch"][f"host_{p}_ms_median"] for r in runs)
           for p in PhaseTimes.PHASES},
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    if args.plot:
        plot(summary, args.plot)


def plot(summary, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = summary["runs"]
    x = range(1, len(runs) + 1)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, key, color in (("tandem", "tandem", "tab:blue"), ("PyTorch " + summary["pytorch_version"], "pytorch", "tab:orange")):
        ys = [r[key]["img_per_s"] for r in runs]
        ax.plot(x, ys, "o-", color=color, label=name)
        ax.axhline(statistics.median(ys), color=color, ls=":", lw=1)
    ax.set_xlabel("repeat (runs alternate)")
    ax.set_ylabel("training img/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{summary['model']} {summary['precision']} training, batch {summary['batch']}, {summary['threads']} threads: "
                 f"ratio {summary['ratio_median']:.2f}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
