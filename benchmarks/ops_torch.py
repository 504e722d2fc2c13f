#!/usr/bin/python3
"""The op sweep's peer in a process of its own, at PyTorch's defaults.

`bench_ops --ops` times each common layer's forward + backward in tandem and in libtorch in one
process, where libtorch's OpenMP threads wait passively (OMP_WAIT_POLICY=PASSIVE, or they would
spin and steal the cores from tandem's turns). Passive waiting slows PyTorch, so those libtorch
figures flatter tandem. This script times the same layers, shapes and backward (a randn output
gradient, fresh gradients each time; median of --repeats after a warm-up) in PyTorch alone, at
its own defaults (an OMP_WAIT_POLICY in the caller's environment is removed by restarting), for
the tandem column of `bench_ops --ops --peer none` to be read against; benchmarks/ops_compare.py
runs the two alternately and tabulates the ratios.
"""
import argparse
import json
import os
import statistics
import sys
import time

if "OMP_WAIT_POLICY" in os.environ:  # read when libgomp loads: restart without it
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from peers import require_optimized_blas  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", help="write the medians to this JSON file")
    args = ap.parse_args()
    require_optimized_blas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    act = (128, 64, 28, 28)
    target = torch.randint(0, 1000, (128,))
    ids = torch.randint(0, 10000, (128, 64))
    # CTC: bench_ops' targets (16 of 10 labels in 1..19), 50 frames each.
    ctc_targets = torch.tensor([[1 + (n * 7 + s * 3) % 19 for s in range(10)] for n in range(16)])
    ctc_frames, ctc_lengths = torch.full((16,), 50), torch.full((16,), 10)
    cases = [
        ("relu (128,64,28,28)", [act], lambda v: torch.relu(v[0])),
        ("add (128,64,28,28)", [act, act], lambda v: v[0] + v[1]),
        ("mul (128,64,28,28)", [act, act], lambda v: v[0] * v[1]),
        ("sigmoid (128,4096)", [(128, 4096)], lambda v: torch.sigmoid(v[0])),
        ("tanh (128,4096)", [(128, 4096)], lambda v: torch.tanh(v[0])),
        ("gelu (128,4096)", [(128, 4096)], lambda v: F.gelu(v[0])),
        ("silu (128,4096)", [(128, 4096)], lambda v: F.silu(v[0])),
        ("elu (128,4096)", [(128, 4096)], lambda v: F.elu(v[0])),
        ("softplus (128,4096)", [(128, 4096)], lambda v: F.softplus(v[0])),
        ("mish (128,4096)", [(128, 4096)], lambda v: F.mish(v[0])),
        ("leaky_relu (128,4096)", [(128, 4096)], lambda v: F.leaky_relu(v[0], 0.2)),
        ("hardswish (128,4096)", [(128, 4096)], lambda v: F.hardswish(v[0])),
        ("hardsigmoid (128,4096)", [(128, 4096)], lambda v: F.hardsigmoid(v[0])),
        ("log_sigmoid (128,4096)", [(128, 4096)], lambda v: F.logsigmoid(v[0])),
        ("relu6 (128,4096)", [(128, 4096)], lambda v: F.relu6(v[0])),
        ("softsign (128,4096)", [(128, 4096)], lambda v: F.softsign(v[0])),
        ("prelu (128,64,28,28)", [act, (64,)], lambda v: F.prelu(v[0], v[1])),
        ("cumsum dim 1 (128,4096)", [(128, 4096)], lambda v: torch.cumsum(v[0], 1)),
        ("sort dim 1 (128,4096)", [(128, 4096)], lambda v: torch.sort(v[0], 1)[0]),
        ("topk 5 (128,1000)", [(128, 1000)], lambda v: torch.topk(v[0], 5)[0]),
        ("logsumexp dim 1 (128,1000)", [(128, 1000)], lambda v: torch.logsumexp(v[0], 1)),
        ("einsum bhqd,bhkd (8,8,128,64)", [(8, 8, 128, 64), (8, 8, 128, 64)],
         lambda v: torch.einsum("bhqd,bhkd->bhqk", v[0], v[1])),
        ("multihead attention self (128,16,256) 8 heads",
         [(128, 16, 256), (768, 256), (768,), (256, 256), (256,)],
         lambda v: F.multi_head_attention_forward(v[0], v[0], v[0], 256, 8, v[1], v[2], None, None,
                                                  False, 0.0, v[3], v[4], training=True,
                                                  need_weights=False)[0]),
        ("max_pool2d 2/2 (128,64,28,28)", [act], lambda v: F.max_pool2d(v[0], 2, 2)),
        ("max_pool2d 3/2 pad 1 (128,64,28,28)", [act], lambda v: F.max_pool2d(v[0], 3, 2, 1)),
        ("avg_pool2d 2/2 (128,64,28,28)", [act], lambda v: F.avg_pool2d(v[0], 2, 2)),
        ("adaptive_avg_pool2d 1 (128,512,7,7)", [(128, 512, 7, 7)],
         lambda v: F.adaptive_avg_pool2d(v[0], 1)),
        ("conv3d 3x3x3 16->32 pad 1 (4,16,16,32,32)", [(4, 16, 16, 32, 32), (32, 16, 3, 3, 3)],
         lambda v: F.conv3d(v[0], v[1], padding=1)),
        ("max_pool3d 2/2 (8,32,16,32,32)", [(8, 32, 16, 32, 32)],
         lambda v: F.max_pool3d(v[0], 2, 2)),
        ("avg_pool3d 3/2 pad 1 (8,32,16,32,32)", [(8, 32, 16, 32, 32)],
         lambda v: F.avg_pool3d(v[0], 3, 2, 1)),
        ("linear 512->1000 (128)", [(128, 512), (1000, 512), (1000,)],
         lambda v: F.linear(v[0], v[1], v[2])),
        ("log_softmax (128,1000)", [(128, 1000)], lambda v: torch.log_softmax(v[0], 1)),
        ("softmax (128,1000)", [(128, 1000)], lambda v: torch.softmax(v[0], 1)),
        ("cross_entropy (128,1000)", [(128, 1000)], lambda v: F.cross_entropy(v[0], target)),
        ("ctc_loss (T 50, N 16, C 20, S 10)", [(50, 16, 20)],
         lambda v: F.ctc_loss(v[0].log_softmax(2), ctc_targets, ctc_frames, ctc_lengths)),
        ("layer_norm 512 (4096,512)", [(4096, 512), (512,), (512,)],
         lambda v: F.layer_norm(v[0], (512,), v[1], v[2])),
        ("dropout 0.5 (128,4096)", [(128, 4096)], lambda v: F.dropout(v[0], 0.5, True)),
        ("sum over h,w (128,64,28,28)", [act], lambda v: v[0].sum((2, 3))),
        ("transpose + contiguous (128,64,784)", [(128, 64, 784)],
         lambda v: v[0].transpose(1, 2).contiguous()),
        ("cat dim 1 (128,64,28,28) x2", [act, act], lambda v: torch.cat([v[0], v[1]], 1)),
        ("embedding 10000x256 (128,64)", [(10000, 256)], lambda v: F.embedding(ids, v[0])),
        ("bmm (64,128,64)x(64,64,128)", [(64, 128, 64), (64, 64, 128)],
         lambda v: torch.bmm(v[0], v[1])),
        ("matmul 1024^3", [(1024, 1024), (1024, 1024)], lambda v: torch.matmul(v[0], v[1])),
        ("lstm 128->256 (T 32, N 64)", [(32, 64, 128), (1024, 128), (1024, 256), (1024,), (1024,)],
         lambda v: torch._VF.lstm(v[0], (torch.zeros(1, 64, 256),) * 2, v[1:], True, 1, 0.0,
                                  True, False, False)[0]),
    ]
    print(f"PyTorch {torch.__version__}, own process, {args.threads} threads, "
          f"median of {args.repeats}: forward + backward")
    results = []
    for name, shapes, fn in cases:
        leaves = [torch.randn(s, requires_grad=True) for s in shapes]
        gy = torch.randn(fn(leaves).shape)

        def step():
            for t in leaves:
                t.grad = None
            fn(leaves).backward(gy)

        step()
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        ms = 1e3 * statistics.median(times)
        results.append({"name": name, "ms": ms})
        print(f"{name:40s} {ms:9.3f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": args.threads,
                       "repeats": args.repeats, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
