#!/usr/bin/python3
"""A WGAN-GP critic step (gradients of gradients), tandem against PyTorch 1.13 (Debian's
python3-torch), side by side: the same DCGAN-style critic on 32x32 images, its Wasserstein loss,
the gradient penalty (the input gradient taken with create_graph and differentiated again) and
an Adam step, on the same batch and thread count. Each repeat runs build/benchmarks/
bench_penalty and the same step in PyTorch, each in its own process at its own defaults (an
OMP_WAIT_POLICY in the caller's environment is removed), alternating. Writes medians and the
ratio (tandem time / PyTorch time) as JSON.

  /usr/bin/python3 benchmarks/bench_penalty.py --out docs/bench/penalty.json [--repeats 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

from peers import require_optimized_blas, run_side

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_worker(args):
    import torch
    import torch.nn as nn
    require_optimized_blas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    critic = nn.Sequential(
        nn.Conv2d(3, 64, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(64, 128, 4, 2, 1),
        nn.LeakyReLU(0.2), nn.Conv2d(128, 256, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(),
        nn.Linear(256 * 4 * 4, 1))
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    b = args.batch
    real, fake = torch.randn(b, 3, 32, 32), torch.randn(b, 3, 32, 32)

    def step():
        optimizer.zero_grad()
        eps = torch.rand(b, 1, 1, 1)
        x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
        g = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)[0]
        penalty = (g.reshape(b, -1).norm(2, dim=1) - 1).pow(2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(2):
        step()
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"framework": "pytorch", "version": torch.__version__,
                      "threads": args.threads, "batch": b,
                      "step_ms": sorted(ms)[len(ms) // 2], "last_loss": loss}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "benchmarks"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--out")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    sizes = ["--threads", str(args.threads), "--steps", str(args.steps), "--batch",
             str(args.batch)]
    ours, theirs = [], []
    t0 = time.time()
    for r in range(args.repeats):
        ours.append(run_side([os.path.join(args.bin, "bench_penalty")] + sizes))
        theirs.append(run_side([sys.executable, os.path.abspath(__file__), "--torch-worker"] + sizes))
        done = r + 1
        eta = (time.time() - t0) / done * (args.repeats - done)
        print(f"repeat {done}/{args.repeats}: step {ours[-1]['step_ms']:.1f} vs "
              f"{theirs[-1]['step_ms']:.1f} ms, ETA {eta:.0f} s", flush=True)
    ratios = [o["step_ms"] / t["step_ms"] for o, t in zip(ours, theirs)]
    result = {"threads": args.threads, "batch": args.batch, "repeats": args.repeats,
              "steps": args.steps, "pytorch": theirs[0]["version"],
              "tandem_ms": statistics.median(o["step_ms"] for o in ours),
              "pytorch_ms": statistics.median(t["step_ms"] for t in theirs),
              "ratio": statistics.median(ratios), "ratios": ratios}
    print(f"WGAN-GP critic step: tandem {result['tandem_ms']:.1f} ms, PyTorch "
          f"{result['pytorch_ms']:.1f} ms, ratio {result['ratio']:.2f} (medians of "
          f"{args.repeats} repeats; ratio = median of per-repeat tandem/PyTorch)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote", args.out)


if __name__ == "__main__":
    main()
