#!/usr/bin/env python3
"""ResNet training on one GPU, tandem against PyTorch in the same run (alternating, medians).

tandem: build-gpu/benchmarks/bench_resnet --device cuda (random in-memory batches, SGD with
Nesterov momentum and weight decay, autocast to bf16 by default). PyTorch: the same ResNet-50
(torchvision's layout, defined here so no torchvision is needed), the same loop, autocast to bf16,
channels-last (PyTorch's fast path for tensor cores). Both synchronize once per step by reading
the loss. Writes JSON: img/s of each, their ratio, and peak GPU memory (tandem's caching
allocator peak vs torch.cuda.max_memory_allocated).

  python3 benchmarks/bench_resnet_gpu.py --bin build-gpu/benchmarks --out gpu-out/resnet_gpu.json

The main example's model and work instead (ResNet-20 on 1x28x28 images, batch 128, f32, both
sides row-major, the CIFAR ResNet class that the golden test checks tandem's against):

  python3 benchmarks/bench_resnet_gpu.py --model resnet20 --channels 1 --size 28 --batch 128 \
      --precision f32 --layout nchw
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from peers import PhaseTimes

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["resnet20", "resnet32", "resnet44", "resnet56", "resnet50"]


def torch_resnet50(num_classes=10):
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, inp, planes, stride):
            super().__init__()
            out = planes * 4
            self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or inp != out:
                self.down = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    layers, inp = [], 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(inp, planes, stride if b == 0 else 1))
            inp = planes * 4
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(2048, num_classes))


def torch_run(args):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    dev = torch.device("cuda")
    if args.model == "resnet50":
        model = torch_resnet50()
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "golden"))
        from make_model_golden import CifarResNet
        model = CifarResNet(int(args.model.replace("resnet", "")), in_channels=args.channels)
    layout = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    model = model.to(dev).to(memory_format=layout)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0}],
                          lr=0.05, momentum=0.9, nesterov=True)
    xs = [torch.randn(args.batch, args.channels, args.size, args.size, device=dev).to(memory_format=layout)
          for _ in range(4)]
    ys = [torch.randint(0, 10, (args.batch,), device=dev) for _ in range(4)]
    torch.cuda.reset_peak_memory_stats()
    ms, queued = [], PhaseTimes()  # until each phase had been queued (the host runs ahead)
    for s in range(args.warmup + args.steps):
        profiled = getattr(args, "profile_last_step", False) and s + 1 == args.warmup + args.steps
        if profiled:
            torch.cuda.profiler.start()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = F.cross_entropy(model(xs[s % 4]), ys[s % 4])
        t_forward = time.perf_counter()
        after_forward = torch.cuda.memory_allocated()  # what backward will need, and the rest
        loss.backward()
        t_backward = time.perf_counter()
        opt.step()
        t_step = time.perf_counter()
        loss.item()
        if profiled:
            torch.cuda.profiler.stop()
        if s >= args.warmup:
            ms.append((time.perf_counter() - t0) * 1000)
            queued.add(t0, t_forward, t_backward, t_step)
    step = statistics.median(ms)
    return {"framework": "pytorch", "version": torch.__version__, "step_ms_median": step,
            "img_per_s": args.batch * 1000 / step, "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "after_forward_bytes": after_forward,
            **queued.medians()}


def run_json(cmd, timeout):
    """Runs one side for at most `timeout` seconds; its last stdout line is its JSON. When it
    fails or runs out of time, returns {"error": why} (the tail of its stderr and stdout, which
    capturing would otherwise hide), and the other side still runs."""
    def text(b):
        return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        status, out, err = f"exit status {proc.returncode}", proc.stdout, proc.stderr
        if proc.returncode == 0:
            return json.loads(out.strip().splitlines()[-1])
    except subprocess.TimeoutExpired as e:
        status, out, err = f"timed out after {timeout} s", text(e.stdout), text(e.stderr)
    tail = "\n".join((err.strip() + "\n" + out.strip()).strip().splitlines()[-40:])
    print(f"{' '.join(cmd)}: {status}:\n{tail}", file=sys.stderr)
    return {"error": f"{status}: {tail[-2000:]}", "timed_out": status.startswith("timed out")}


def tandem_command(args):
    return [os.path.join(args.bin, "bench_resnet"), "--device", "cuda", "--model", args.model,
           "--batch", str(args.batch), "--channels", str(args.channels), "--size", str(args.size),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--precision", args.precision,
           "--threads", "4"] + (["--channels-last"] if args.layout == "nhwc" else []) \
        + (["--cudnn-benchmark"] if args.cudnn_benchmark else []) \
        + (["--profile-last-step"] if getattr(args, "profile_last_step", False) else [])


def torch_command(args):
    return [sys.executable, os.path.abspath(__file__), "--torch-child", json.dumps(vars(args))]


def tandem_run(args):
    return run_json(tandem_command(args), args.side_timeout)


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build-gpu/benchmarks")
    p.add_argument("--model", default="resnet50", choices=MODELS)
    p.add_argument("--channels", type=int, default=3, help="of the input images")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--layout", default="nhwc", choices=["nhwc", "nchw"],
                   help="both sides' batches and models channels-last or row-major")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="both sides choose cuDNN's algorithms by timing them (torch.backends.cudnn.benchmark)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--side-timeout", type=int, default=45,
                   help="seconds one side of one repeat may take; a side that runs out is not rerun")
    p.add_argument("--out")
    return p


def main():
    args = parser().parse_args()
    runs, start = [], time.time()
    for r in range(args.repeats):
        # tandem first (a run cut short by a time limit keeps its figure), then PyTorch in a child
        # process, so each side has the GPU to itself and its own allocator. A side that fails
        # leaves its error in the JSON and the other side's figures stand.
        # A side that ran out of time once is not run again: the repeats left go to the other.
        def again(side):
            return not any(old[side].get("timed_out") for old in runs)
        skipped = {"error": "not run: it timed out in an earlier repeat"}
        run = {"tandem": tandem_run(args) if again("tandem") else skipped,
               "pytorch": run_json(torch_command(args), args.side_timeout) if again("pytorch") else skipped}
        t, pt = run["tandem"], run["pytorch"]
        if "error" not in t and "error" not in pt:
            run["ratio"] = t["img_per_s"] / pt["img_per_s"]
            run["memory_ratio"] = t["peak_allocated_bytes"] / pt["peak_allocated_bytes"]
            if "after_forward_bytes" in t and "after_forward_bytes" in pt:
                run["after_forward_ratio"] = t["after_forward_bytes"] / pt["after_forward_bytes"]
        runs.append(run)
        fmt = lambda side: "failed" if "error" in side else f"{side['img_per_s']:.0f} img/s"
        print(f"[{r + 1}/{args.repeats}] tandem {fmt(t)}, PyTorch {fmt(pt)} | {time.time() - start:.0f} s",
              file=sys.stderr)
        write_summary(args, runs)  # after every repeat: a later time limit loses nothing
    failed = any("error" in run[side] for run in runs for side in ("tandem", "pytorch"))
    sys.exit(1 if failed else 0)


def write_summary(args, runs):
    def median(side, key):
        values = [run[side][key] for run in runs if key in run[side]] if side else \
                 [run[key] for run in runs if key in run]
        return statistics.median(values) if values else None

    for run in runs:
        for side in ("tandem", "pytorch"):
            r = run[side]
            phases = [r.get(f"host_{p}_ms_median") for p in PhaseTimes.PHASES]
            if None not in phases and r.get("step_ms_median"):
                r["host_share"] = sum(phases) / r["step_ms_median"]
    versions = [run["pytorch"]["version"] for run in runs if "version" in run["pytorch"]]
    summary = {"model": args.model, "channels": args.channels, "layout": args.layout, "batch": args.batch,
               "size": args.size, "precision": args.precision,
               "cudnn_benchmark": args.cudnn_benchmark,  # off: cuDNN's heuristics on both sides
               "pytorch_version": versions[0] if versions else None,
               "tandem_img_per_s": median("tandem", "img_per_s"),
               "pytorch_img_per_s": median("pytorch", "img_per_s"),
               "tandem_vs_pytorch": median(None, "ratio"),
               "memory_tandem_vs_pytorch": median(None, "memory_ratio"),
               "after_forward_tandem_vs_pytorch": median(None, "after_forward_ratio"),
               # Host time queueing a step against the step: near 1, the host bounds the step.
               **{f"{side}_host_share": median(side, "host_share") for side in ("tandem", "pytorch")},
               # cudaMalloc calls in tandem's timed steps (each waits for the GPU): 0 expected.
               "tandem_timed_device_allocs": median("tandem", "timed_device_allocs"),
               "repeats_done": len(runs), "runs": runs}
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-child":
        print(json.dumps(torch_run(argparse.Namespace(**json.loads(sys.argv[2])))))
    else:
        main()
