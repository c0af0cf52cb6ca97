#!/usr/bin/env python3
"""Single-process PyTorch reference for gssp's main job: the same LeNet-5, data and optimizer,
to run side by side with `./scripts/run-main.sh` on the same machine.

LeNet-5 (conv 6@5x5 pad 2, relu, maxpool 2, conv 16@5x5, relu, maxpool 2, fc 120, relu,
fc 84, relu, fc 10) on Fashion-MNIST (IDX files, gzipped or raw; inputs normalised with
mean 0.2860 and std 0.3530), plain SGD with momentum and weight decay, a fresh shuffle every
epoch, evaluation on the test set after each epoch.

    python3 scripts/pytorch_reference.py --seeds 1,2,3,4,5            # the reference: constant lr
    python3 scripts/pytorch_reference.py --seeds 1,2,3 --schedule cosine

Needs `torch` and `numpy` (not installed by the project's scripts; CPU is enough). Prints
one line per seed and the median of the final accuracies.
"""

import argparse
import gzip
import math
import os
import statistics
import struct
import time

import numpy as np
import torch
from torch import nn


def read_idx(folder, name):
    """The array in IDX file `name` (or `name`.gz) of `folder`."""
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                data = f.read()
            zero, dtype, dims = struct.unpack(">HBB", data[:4])
            if zero != 0 or dtype != 0x08:
                raise SystemExit(f"{path}: not an unsigned-byte IDX file")
            shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    raise SystemExit(f"{folder}: no {name} or {name}.gz")


def load(folder, prefix, mean, std):
    images = read_idx(folder, f"{prefix}-images-idx3-ubyte").astype(np.float32) / 255.0
    labels = read_idx(folder, f"{prefix}-labels-idx1-ubyte").astype(np.int64)
    x = torch.from_numpy((images - mean) / std).unsqueeze(1)
    return x, torch.from_numpy(labels)


def lenet5(classes=10):
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, classes),
    )


def accuracy(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum().item()
    model.train()
    return correct / len(x)


def run(seed, args, train, test):
    torch.manual_seed(seed)
    model = lenet5()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(train[0]) / args.batch)
    total = args.epochs * steps_per_epoch
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    t0 = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(len(train[0]))
        for i in range(0, len(order), args.batch):
            if args.schedule == "cosine":
                for g in opt.param_groups:
                    g["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            idx = order[i : i + args.batch]
            opt.zero_grad()
            loss_fn(model(train[0][idx]), train[1][idx]).backward()
            opt.step()
            step += 1
        acc = accuracy(model, *test)
        print(f"seed {seed} epoch {epoch + 1}: test accuracy {100 * acc:.2f}%", flush=True)
    return acc, time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seeds", default="1")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    train = load(args.data, "train", 0.2860, 0.3530)
    test = load(args.data, "t10k", 0.2860, 0.3530)
    finals = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        acc, secs = run(seed, args, train, test)
        finals.append(acc)
        print(f"seed {seed}: final test accuracy {100 * acc:.2f}% in {secs:.1f} s "
              f"(batch {args.batch}, lr {args.lr} {args.schedule}, momentum {args.momentum}, "
              f"weight decay {args.weight_decay}, {args.epochs} epochs)", flush=True)
    print(f"median final test accuracy over {len(finals)} seeds: "
          f"{100 * statistics.median(finals):.2f}%")


if __name__ == "__main__":
    main()
