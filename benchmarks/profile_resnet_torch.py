#!/usr/bin/python3
"""Where PyTorch's time goes in the ResNet-20 training step of bench_resnet.py (same model, batch
128 of 1x28x28, 2 threads, SGD with Nesterov momentum; weight decay on every parameter here):
prints ms/step over 20 steps, then torch.profiler's table of 10 steps by self CPU time.

  /usr/bin/python3 benchmarks/profile_resnet_torch.py
"""
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "golden"))
from make_model_golden import CifarResNet  # noqa: E402

torch.set_num_threads(2)
torch.manual_seed(0)
model = CifarResNet(20, in_channels=1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
xs = [torch.randn(128, 1, 28, 28) for _ in range(4)]
ys = [torch.randint(0, 10, (128,)) for _ in range(4)]


def step(s):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(xs[s % 4]), ys[s % 4])
    loss.backward()
    opt.step()
    loss.item()


for s in range(5):
    step(s)
t = time.perf_counter()
for s in range(20):
    step(s)
print("ms/step", (time.perf_counter() - t) / 20 * 1000)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for s in range(10):
        step(s)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
