#!/usr/bin/python3
"""The main example's work in PyTorch, written as a PyTorch user would: the peer of
`tandem-resnet` in benchmarks/bench_example.py.

ResNet-20 (the CIFAR ResNet class of tests/golden/make_model_golden.py, which the golden test
checks tandem's against) on Fashion-MNIST read from the same gzip IDX files, kept as uint8 as
torchvision keeps it; per-sample random crop (padding 2) + horizontal flip + normalization in a
DataLoader with one worker; SGD with Nesterov momentum 0.9 and weight decay 5e-4 on conv and linear
weights only; OneCycleLR peaking at 0.2 after 25% of the steps; evaluation on the 10,000 test
images (batch 500) after every epoch. Everything else at PyTorch's defaults. With --device cuda,
what a PyTorch user does for a GPU: the model on the GPU, the loader's batches in page-locked
memory (pin_memory) copied without waiting (non_blocking), the transforms still per sample in the
loader's workers. The transforms are written here (what torchvision's RandomCrop, RandomHorizontalFlip
and Normalize do on a tensor), so that no torchvision is needed (the GPU machine has none).

  /usr/bin/python3 benchmarks/train_resnet_torch.py [--epochs 5] [--max-steps N] [--threads T]
                                                     [--device cuda]

Prints one line per epoch and, last, a JSON line with the accuracy and the times.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "golden"))
from make_model_golden import CifarResNet  # noqa: E402
from peers import require_optimized_blas  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape).copy())


class Images(torch.utils.data.Dataset):
    """uint8 (N, H, W) images and labels; each sample converted to f32 in [0, 1], then transformed."""

    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].unsqueeze(0).float().div_(255)
        return self.transform(x), int(self.labels[i])


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, x):
        return (x - self.mean) / self.std


class CropFlipNormalize(Normalize):
    """A random crop of the image zero-padded by `padding` on each side, a horizontal flip with
    probability 1/2, then normalization (torchvision's RandomCrop(padding), RandomHorizontalFlip,
    Normalize)."""

    def __init__(self, padding, mean, std):
        super().__init__(mean, std)
        self.padding = padding

    def __call__(self, x):
        h, w = x.shape[-2:]
        p = self.padding
        padded = F.pad(x, (p, p, p, p))
        i, j = (int(v) for v in torch.randint(0, 2 * p + 1, (2,)))
        x = padded[..., i:i + h, j:j + w]
        if torch.rand(1).item() < 0.5:
            x = x.flip(-1)
        return super().__call__(x)


def evaluate(model, loader, bf16, device):
    model.eval()
    correct = total = 0
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (the schedule still plans for --epochs)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                   help="bf16: torch.autocast, as tandem-resnet --precision bf16")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        require_optimized_blas()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    bf16 = args.precision == "bf16"
    start = time.perf_counter()

    d = args.data_dir
    mean, std = 0.2860, 0.3530
    train_set = Images(read_idx(f"{d}/train-images-idx3-ubyte.gz"), read_idx(f"{d}/train-labels-idx1-ubyte.gz"),
                       CropFlipNormalize(2, mean, std))
    test_set = Images(read_idx(f"{d}/t10k-images-idx3-ubyte.gz"), read_idx(f"{d}/t10k-labels-idx1-ubyte.gz"),
                      Normalize(mean, std))
    pin = device.type == "cuda"
    train = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                                        drop_last=True, num_workers=args.workers, pin_memory=pin)
    test = torch.utils.data.DataLoader(test_set, batch_size=500, num_workers=args.workers, pin_memory=pin)

    model = CifarResNet(20, in_channels=1).to(device)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.2, momentum=0.9, nesterov=True)
    per_epoch = len(train)
    total_steps = per_epoch * args.epochs
    stop_at = min(total_steps, args.max_steps) if args.max_steps > 0 else total_steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=total_steps, pct_start=0.25)
    print(f"pytorch {torch.__version__}: resnet20 on fashion-mnist, {device}, {torch.get_num_threads()} threads, "
          f"{args.epochs} epochs of {per_epoch} steps", flush=True)

    step, acc, train_seconds, images_seen = 0, 0.0, 0.0, 0
    for epoch in range(args.epochs):
        if step >= stop_at:
            break
        t0 = time.perf_counter()
        loss_sum, count, images = 0.0, 0, 0
        for x, y in train:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item()
            count += 1
            images += len(y)
            step += 1
            if step >= stop_at:
                break
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        images_seen += images
        acc = evaluate(model, test, bf16, device)
        print(f"epoch {epoch + 1}: train loss {loss_sum / count:.4f}, test accuracy {100 * acc:.2f}%, "
              f"{images / seconds:.0f} img/s, {seconds:.1f} s", flush=True)
    result = {"framework": "pytorch", "version": torch.__version__, "device": str(device), "steps": step,
              "test_acc": acc, "train_seconds": train_seconds,
              "train_img_per_s": images_seen / train_seconds if train_seconds else 0.0,
              "wall_seconds": time.perf_counter() - start}
    if device.type == "cuda":
        result["gpu_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
