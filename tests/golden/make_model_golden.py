#!/usr/bin/python3
"""Regenerates resnet8.safetensors: a CIFAR-style ResNet (depth 8, 1 input channel, 10 classes,
option-A shortcuts, as tandem's CifarResNet) in PyTorch 1.13, with its weights, an input batch,
the training-mode logits, the loss gradients of some parameters, the updated running statistics
and the evaluation-mode logits. Run: /usr/bin/python3 tests/golden/make_model_golden.py

The file is written by the small safetensors writer below, independent of tandem's, so the test
that reads it also checks tandem's reader against another implementation."""
import json
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class PadShortcut(nn.Module):
    def __init__(self, stride, pad):
        super().__init__()
        self.stride, self.pad = stride, pad

    def forward(self, x):
        return F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad, self.pad))


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            self.downsample = PadShortcut(stride, (planes - in_planes) // 2)
        else:
            self.downsample = None

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class CifarResNet(nn.Module):
    """He et al. 2016's CIFAR ResNet of depth 6n + 2 (the benchmark uses the same class)."""

    def __init__(self, depth, in_channels=3, num_classes=10):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        planes_in = 16
        stages = []
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(planes_in, planes, stride if b == 0 else 1))
                planes_in = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def write_safetensors(path, tensors, metadata):
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(chunks))


if __name__ == "__main__":
    torch.manual_seed(2024)
    model = CifarResNet(8, in_channels=1)
    with torch.no_grad():  # non-trivial BN state so that the test sees every field used
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.8, 1.2)
    out = {"model." + k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 1, 28, 28)
    y = torch.tensor([3, 1, 4, 1])
    model.train()
    logits = model(x)
    F.cross_entropy(logits, y).backward()
    out.update({"input": x, "labels": y, "logits_train": logits})
    for k, p in model.named_parameters():
        out["grad." + k] = p.grad
    for k, b in model.named_buffers():
        out["after." + k] = b.clone()
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = model(x)
    write_safetensors(os.path.join(HERE, "resnet8.safetensors"), out,
                      {"source": "make_model_golden.py", "torch": torch.__version__})
    print(f"wrote {len(out)} tensors to resnet8.safetensors")
