#!/usr/bin/env python3
"""ResNet training on one GPU, tandem against PyTorch in the same run (alternating, medians).

tandem: build-gpu/benchmarks/bench_resnet --device cuda (random in-memory batches, SGD with
Nesterov momentum and weight decay, autocast to bf16 by default). PyTorch: the same ResNet-50
(torchvision's layout, defined here so no torchvision is needed), the same loop, autocast to bf16,
channels-last (PyTorch's fast path for tensor cores). Both synchronize once per step by reading
the loss. Writes JSON: img/s of each, their ratio, and peak GPU memory (tandem's caching
allocator peak vs torch.cuda.max_memory_allocated).

  python3 benchmarks/bench_resnet_gpu.py --bin build-gpu/benchmarks --out gpu-out/resnet_gpu.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


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
    dev = torch.device("cuda")
    model = torch_resnet50().to(dev).to(memory_format=torch.channels_last)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0}],
                          lr=0.05, momentum=0.9, nesterov=True)
    xs = [torch.randn(args.batch, 3, args.size, args.size, device=dev).to(memory_format=torch.channels_last)
          for _ in range(4)]
    ys = [torch.randint(0, 10, (args.batch,), device=dev) for _ in range(4)]
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = F.cross_entropy(model(xs[s % 4]), ys[s % 4])
        loss.backward()
        opt.step()
        loss.item()
        if s >= args.warmup:
            ms.append((time.perf_counter() - t0) * 1000)
    step = statistics.median(ms)
    return {"framework": "pytorch", "version": torch.__version__, "step_ms_median": step,
            "img_per_s": args.batch * 1000 / step, "peak_allocated_bytes": torch.cuda.max_memory_allocated()}


def run_json(cmd):
    """Runs one side; its last stdout line is its JSON. When it fails, shows why (its stderr and
    stdout, which capturing would otherwise hide) and stops."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr.strip() + "\n" + proc.stdout.strip()).strip().splitlines()[-40:])
        sys.exit(f"{' '.join(cmd)} failed with exit status {proc.returncode}:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tandem_run(args):
    cmd = [os.path.join(args.bin, "bench_resnet"), "--device", "cuda", "--model", "resnet50",
           "--batch", str(args.batch), "--channels", "3", "--size", str(args.size),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--precision", args.precision,
           "--threads", "4"] + (["--channels-last"] if args.tandem_layout == "nhwc" else [])
    return run_json(cmd)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build-gpu/benchmarks")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--tandem-layout", default="nhwc", choices=["nhwc", "nchw"],
                   help="tandem's batches channels-last (as PyTorch's here) or row-major")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out")
    args = p.parse_args()
    runs, start = [], time.time()
    for r in range(args.repeats):
        # PyTorch in a child process, so each side has the GPU to itself and its own allocator.
        pt = run_json([sys.executable, __file__, "--torch-child", json.dumps(vars(args))])
        t = tandem_run(args)
        runs.append({"tandem": t, "pytorch": pt, "ratio": t["img_per_s"] / pt["img_per_s"],
                     "memory_ratio": t["peak_allocated_bytes"] / pt["peak_allocated_bytes"]})
        print(f"[{r + 1}/{args.repeats}] tandem {t['img_per_s']:.0f} img/s, PyTorch {pt['img_per_s']:.0f} "
              f"img/s | {time.time() - start:.0f} s", file=sys.stderr)
    summary = {"model": "resnet50", "batch": args.batch, "size": args.size, "precision": args.precision,
               "pytorch_version": runs[0]["pytorch"]["version"],
               "tandem_img_per_s": statistics.median(r["tandem"]["img_per_s"] for r in runs),
               "pytorch_img_per_s": statistics.median(r["pytorch"]["img_per_s"] for r in runs),
               "tandem_vs_pytorch": statistics.median(r["ratio"] for r in runs),
               "memory_tandem_vs_pytorch": statistics.median(r["memory_ratio"] for r in runs), "runs": runs}
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-child":
        print(json.dumps(torch_run(argparse.Namespace(**json.loads(sys.argv[2])))))
    else:
        main()
