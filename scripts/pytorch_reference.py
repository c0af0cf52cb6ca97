#!/usr/bin/env python3
"""Single-process PyTorch reference for gssp: the same models, data, augmentation and optimizer,
to run side by side with gssp on the same machine.

Models: LeNet-5 (conv 6@5x5 pad 2, relu, maxpool 2, conv 16@5x5, relu, maxpool 2, fc 120,
relu, fc 84, relu, fc 10); ResNet-18 in its CIFAR form (3x3 stem, no max pool, stages
64-128-256-512 of two basic blocks, 1x1 projection on a skip that changes shape, global
average pool, linear; 11,173,962 parameters); VGG-19 with batch norm in its CIFAR form (16
3x3 conv layers, max pools, linear 512 -> 10; 20,040,522 parameters). `--width` scales every
channel count, as gssp's width multiplier does.

Data in the official formats: MNIST / Fashion-MNIST IDX (gzipped or raw), CIFAR-10 binary
batches (every data_batch_*.bin; test_batch.bin or the single test_batch*.bin). Inputs are
normalised with gssp's per-channel constants. `--augment crop-flip` (the default for
CIFAR-10) draws a random crop of the image zero-padded by 4 pixels and a horizontal flip per
sample, as gssp's `data.augment = "crop-flip"` does. Plain SGD with momentum and weight decay,
a fresh shuffle every epoch, evaluation on the test set after each epoch.

    python3 scripts/pytorch_reference.py --seeds 1,2,3,4,5                    # LeNet-5, Fashion-MNIST
    python3 scripts/pytorch_reference.py --seeds 1,2,3 --schedule cosine
    python3 scripts/pytorch_reference.py --model resnet18 --data ../shared/data/cifar10 \\
        --batch 32 --epochs 1 --seeds 1,2,3
    python3 scripts/pytorch_reference.py --model vgg19 --bench-step 20 --batch 32   # images/s
    python3 scripts/pytorch_reference.py --load runs/x/model.safetensors \\
        --data ../shared/data/mnist          # test accuracy of a model gssp exported

`--model seq2seq --bench-step N` times N training steps of the LSTM encoder-decoder (bentrevett's
pytorch-seq2seq, tutorial 1: embeddings 256, hidden 512, 2 layers, dropout 0.5, teacher forcing
0.5, uniform(-0.08, 0.08) init, CrossEntropyLoss ignoring <pad>, clip_grad_norm 1, Adam lr 1e-3)
on Multi30k's training pairs (`--data`, default ../shared/data/multi30k), German to English,
tokenized and numbered by gssp's rules (src/data/text.rs: the tokenizer, vocabularies of min
frequency 2) and batched padded, time-major. `--batches FILE` takes the batches from FILE (one line
of pair indices per batch), as `gssp bench step --model seq2seq --batches-out FILE` wrote them,
so both time the same batches; otherwise they are bucketed as gssp's BucketSampler does (shuffle,
sort windows of 100 batches by length, shuffle the batches), with another random stream.

    python3 scripts/pytorch_reference.py --model seq2seq --batch 32 --bench-step 40
    gssp bench step --model seq2seq --batch 32 --seconds 10 --batches-out /tmp/b.txt
    python3 scripts/pytorch_reference.py --model seq2seq --batch 32 --batches /tmp/b.txt \\
        --bench-step $(wc -l < /tmp/b.txt)     # the same batches: sentences_per_s

Without `--bench-step`, `--model seq2seq` trains that model for `--epochs` on all training pairs
with one `--seed` (torch.manual_seed and Python's RNG, which draws teacher forcing once per
decoder step for the whole batch; batches of `--batch`, default 32, bucketed as above afresh
every epoch from (seed, epoch); Adam, `--lr` default 1e-3) and evaluates it: perplexity on val
and test2016 with full teacher forcing (exp of the summed token NLL over all non-pad target
tokens / their count; `test_ppl_free_running` is the tutorial's figure, teacher forcing 0),
and BLEU-4 of greedy translations of test2016 (from <sos>, arg-max fed back, at most 50 tokens,
stopping at <eos>; tokens joined as gssp's detokenize does) against the raw test2016.en lines,
by sacrebleu.corpus_bleu(lowercase=True). Evaluation runs in batches of 128 in file order.
`--json FILE` also writes the results, `--translations FILE` the translations one a line;
`--limit-batches N` trains only the first N batches of each epoch (a quick check). Needs
`sacrebleu` too.

    python3 scripts/pytorch_reference.py --model seq2seq --epochs 1 --seed 1 \\
        --json /tmp/s2s.json --translations /tmp/s2s.txt     # val_ppl, test_ppl, bleu
    python3 scripts/pytorch_reference.py --model seq2seq --epochs 1 --limit-batches 20

A controlled comparison with gssp (same initial weights, same batch sequence; only the dropout
masks and teacher-forcing draws differ): `--save-init FILE` writes the seed's initial weights
and exits, `--init FILE` starts training from them (gssp: `--set model.init_file=FILE`), and
`--batches FILE` trains one epoch on the batches `gssp batches --config ...` wrote.

    gssp batches --config configs/seq2seq_multi30k.toml --set run.seed=1 --out /tmp/b1.txt
    python3 scripts/pytorch_reference.py --model seq2seq --seed 1 --save-init /tmp/init1.st
    python3 scripts/pytorch_reference.py --model seq2seq --epochs 1 --seed 1 \\
        --init /tmp/init1.st --batches /tmp/b1.txt --json /tmp/s2s.json

`--load FILE` reads a `model.safetensors` that gssp wrote at the end of a run into the
matching module below with `load_state_dict` (strict: every name and shape must match) and
prints its test accuracy and loss, to compare with `gssp eval`. Model, width, hidden widths
and dataset default to what the file's metadata says. Needs the `safetensors` package.

Needs `torch` and `numpy`; `scripts/install_torch_cpu.sh` installs CPU PyTorch into a cache
venv and prints its python. One thread by default (`--threads`), like one gssp rank.
"""

import argparse
import gzip
import json
import math
import os
import random
import statistics
import unicodedata
import struct
import time

import numpy as np
import torch
from torch import nn

MEAN_STD = {
    "mnist": ([0.1307], [0.3081]),
    "fashion-mnist": ([0.2860], [0.3530]),
    "cifar10": ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]),
}
CROP_PAD = 4


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


def read_cifar(folder, train):
    """(images N x 3 x 32 x 32 uint8, labels) from the official binary batches."""
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if train:
        files = [n for n in names if n.startswith("data_batch_") and n.endswith(".bin")]
        files.sort(key=lambda n: int("".join(c for c in n if c.isdigit()) or 0))
    else:
        files = ["test_batch.bin"] if "test_batch.bin" in names else [
            n for n in names if n.startswith("test_batch") and n.endswith(".bin")]
        if len(files) > 1:
            raise SystemExit(f"{folder}: more than one test_batch*.bin: {files}")
    if not files:
        raise SystemExit(f"{folder}: no CIFAR-10 {'data_batch_*' if train else 'test_batch*'}.bin")
    parts = []
    for n in files:
        raw = np.fromfile(os.path.join(folder, n), dtype=np.uint8)
        if raw.size == 0 or raw.size % 3073:
            raise SystemExit(f"{n}: {raw.size} bytes is not a multiple of the 3073-byte record")
        parts.append(raw.reshape(-1, 3073))
    rec = np.concatenate(parts)
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)


def load(dataset, folder, train):
    """(raw images as float in [0, 1], labels) of one split."""
    if dataset == "cifar10":
        images, labels = read_cifar(folder, train)
    else:
        prefix = "train" if train else "t10k"
        images = read_idx(folder, f"{prefix}-images-idx3-ubyte")[:, None]
        labels = read_idx(folder, f"{prefix}-labels-idx1-ubyte").astype(np.int64)
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels)


def normalise(x, dataset):
    mean, std = MEAN_STD[dataset]
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return (x - m) / s


def crop_flip(x, gen):
    """Random crop of each zero-padded image (same size) and a flip with probability 1/2."""
    n, _, h, w = x.shape
    padded = nn.functional.pad(x, (CROP_PAD,) * 4)
    offsets = torch.randint(0, 2 * CROP_PAD + 1, (n, 2), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    out = torch.empty_like(x)
    for i in range(n):
        dy, dx = offsets[i].tolist()
        img = padded[i, :, dy : dy + h, dx : dx + w]
        out[i] = img.flip(2) if flips[i] else img
    return out


def mlp(channels, side, hidden, classes=10):
    """Flatten, then a linear layer and ReLU per hidden width, then the logits (gssp's mlp)."""
    layers, cin = [nn.Flatten()], channels * side * side
    for h in hidden:
        layers += [nn.Linear(cin, h), nn.ReLU()]
        cin = h
    return nn.Sequential(*layers, nn.Linear(cin, classes))


def lenet5(channels, side, classes=10, width=1.0):
    c1, c2 = round(6 * width), round(16 * width)
    s = ((side + 4 - 4) // 2 - 4) // 2  # conv pad 2, pool, conv, pool
    return nn.Sequential(
        nn.Conv2d(channels, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * s * s, round(120 * width)), nn.ReLU(),
        nn.Linear(round(120 * width), round(84 * width)), nn.ReLU(),
        nn.Linear(round(84 * width), classes),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(channels, classes=10, width=1.0):
    widths = [round(c * width) for c in (64, 128, 256, 512)]
    layers = [nn.Conv2d(channels, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
              nn.ReLU()]
    cin = widths[0]
    for i, cout in enumerate(widths):
        for b in range(2):
            layers.append(BasicBlock(cin, cout, 2 if (b == 0 and i > 0) else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def vgg19(channels, classes=10, width=1.0):
    plan = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
            512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]
    layers, cin = [], channels
    for v in plan:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            cout = round(v * width)
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
            cin = cout
    layers += [nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def build(name, x, width, mlp_hidden=(128,)):
    channels, side = x.shape[1], x.shape[2]
    if name == "lenet5":
        return lenet5(channels, side, width=width)
    if name == "mlp":
        return mlp(channels, side, mlp_hidden)
    if side != 32:
        raise SystemExit(f"{name} takes 32x32 images (CIFAR-10), got {channels}x{side}x{side}")
    return resnet18(channels, width=width) if name == "resnet18" else vgg19(channels, width=width)


def accuracy(model, x, y, batch=500):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum().item()
    model.train()
    return correct / len(x)


def evaluate_file(args, test):
    """Loads a gssp-exported safetensors file into the matching module and evaluates it on
    the test set: accuracy and mean cross-entropy, as `gssp eval` reports them."""
    from safetensors.torch import load_file

    model = build(args.model, test[0], args.width, args.mlp_hidden)
    # strict: a missing, extra or differently shaped tensor is an error.
    model.load_state_dict(load_file(args.load))
    model.eval()
    x, y = normalise(test[0], args.dataset), test[1]
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), 500):
            logits = model(x[i : i + 500])
            correct += (logits.argmax(1) == y[i : i + 500]).sum().item()
            loss += nn.functional.cross_entropy(logits, y[i : i + 500], reduction="sum").item()
    version = file_metadata(args.load).get("gssp_version", "?")
    print(f"{args.load} (gssp {version}) {args.model} width {args.width} on {args.dataset}: "
          f"test accuracy {100 * correct / len(x):.2f}% ({len(x)} images), "
          f"test loss {loss / len(x):.4f} (pytorch {torch.__version__})")


def file_metadata(path):
    """The `__metadata__` of a safetensors file gssp wrote ({} for one without)."""
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        return f.metadata() or {}


def make_optimizer(model, args):
    return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                           weight_decay=args.weight_decay)


def sync(device):
    """Waits for the GPU's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench_step(args, train):
    """Images per second of the training step (augmentation, forward, backward, SGD). On
    `--device cuda` the batch is one fixed batch already on the GPU, without augmentation
    (what `gssp bench step --device cuda` times, which also uploads its batch each step)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dev = torch.device(args.device)
    model = build(args.model, train[0], args.width).to(dev)
    opt = make_optimizer(model, args)
    loss_fn = nn.CrossEntropyLoss()
    x_raw, y = train[0][: args.batch], train[1][: args.batch]
    if dev.type == "cuda":
        args.augment = "none"
        x_raw, y = normalise(x_raw, args.dataset).to(dev), y.to(dev)

    def step():
        if dev.type == "cuda":
            x = x_raw
        else:
            x = normalise(crop_flip(x_raw, gen) if args.augment == "crop-flip" else x_raw,
                          args.dataset)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(args.bench_step):
        step()
    sync(dev)
    secs = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__} {args.model} (width {args.width}, {params} parameters) "
          f"batch {args.batch}, {args.threads} thread(s), augment {args.augment}: "
          f"{args.bench_step} steps in {secs:.2f} s")
    print(f"images_per_s: {args.batch * args.bench_step / secs:.1f}")


# ---- seq2seq: Multi30k, gssp's tokenizer and vocabulary, the tutorial's model ----------------

PAD_ID, SOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIALS = ["<pad>", "<sos>", "<eos>", "<unk>"]
MIN_FREQ = 2
BUCKET_WINDOW = 100


def is_alnum(c):
    """Rust's char::is_alphanumeric: letters (and other alphabetic) or numbers."""
    return c.isalpha() or unicodedata.category(c)[0] == "N"


def tokenize(line):
    """gssp's tokenizer (src/data/text.rs, rules 1-5): lowercase; words of alphanumerics joined
    by a hyphen between alphanumerics or `.,:` between ASCII digits; an apostrophe between two
    letters starts a clitic token; every other non-space character is a token of its own."""
    chars = line.lower()
    n = len(chars)

    def joins(prev, mid, nxt):
        if mid == "-":
            return is_alnum(prev) and is_alnum(nxt)
        if mid in ".,:":
            return prev in "0123456789" and nxt in "0123456789"
        return False

    def word_end(start):
        i = start
        while i < n:
            if is_alnum(chars[i]):
                i += 1
            elif i > start and i + 1 < n and joins(chars[i - 1], chars[i], chars[i + 1]):
                i += 2
            else:
                break
        return i

    tokens, i = [], 0
    while i < n:
        c = chars[i]
        if c.isspace():
            i += 1
            continue
        if is_alnum(c):
            end = word_end(i)
        elif (c in "'\u2019" and i > 0 and chars[i - 1].isalpha() and i + 1 < n
              and chars[i + 1].isalpha()):
            end = word_end(i + 1)
        else:
            end = i + 1
        tokens.append(chars[i:end])
        i = end
    return tokens


def read_lines(folder, name):
    """Lines of `name` (or `name`.gz) in `folder` by gssp's rules: a trailing \\r dropped,
    trailing empty lines ignored, any other empty line an error."""
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            lines = [l[:-1] if l.endswith("\r") else l for l in data.decode("utf-8").split("\n")]
            while lines and lines[-1] == "":
                lines.pop()
            for i, l in enumerate(lines):
                if l == "":
                    raise SystemExit(f"{path}: line {i + 1} is empty")
            return lines
    raise SystemExit(f"{folder}: no {name} or {name}.gz (Multi30k: train.de, train.en)")


def build_vocab(sentences):
    """{token: id}: the specials, then tokens seen MIN_FREQ times or more, by frequency
    (descending) then UTF-8 bytes (ascending), as gssp's Vocab::build."""
    counts = {}
    for s in sentences:
        for t in s:
            counts[t] = counts.get(t, 0) + 1
    kept = [(t, c) for t, c in counts.items() if c >= MIN_FREQ and t not in SPECIALS]
    kept.sort(key=lambda tc: (-tc[1], tc[0].encode("utf-8")))
    return {t: i for i, t in enumerate(SPECIALS + [t for t, _ in kept])}


def encode(sentences, vocab):
    """Id lists of tokenized `sentences`, each wrapped as <sos> ... <eos>; unknown tokens <unk>."""
    return [[SOS_ID] + [vocab.get(t, UNK_ID) for t in s] + [EOS_ID] for s in sentences]


def read_pairs(folder, split):
    """(German lines, English lines) of `split` (train, val, test2016)."""
    de, en = read_lines(folder, f"{split}.de"), read_lines(folder, f"{split}.en")
    if len(de) != len(en):
        raise SystemExit(f"{folder}: {split}.de has {len(de)} lines, {split}.en {len(en)}")
    return de, en


def load_multi30k(folder):
    """(German vocab, English vocab), both built on the training pairs, and the training
    pairs as (German id lists, English id lists)."""
    de, en = ([tokenize(l) for l in lines] for lines in read_pairs(folder, "train"))
    vde, ven = build_vocab(de), build_vocab(en)
    return vde, ven, encode(de, vde), encode(en, ven)


def load_multi30k_train(folder):
    """(German id lists, English id lists, German vocab size, English vocab size), each
    sentence wrapped as <sos> ... <eos>."""
    vde, ven, src, tgt = load_multi30k(folder)
    return src, tgt, len(vde), len(ven)


def pad_time_major(seqs, idx):
    """[longest x len(idx)] int64 tensor of seqs[i] for i in idx, padded with <pad>."""
    rows = max(len(seqs[i]) for i in idx)
    out = torch.full((rows, len(idx)), PAD_ID, dtype=torch.long)
    for col, i in enumerate(idx):
        out[: len(seqs[i]), col] = torch.tensor(seqs[i])
    return out


def bucket_batches(src, tgt, batch, seed):
    """One epoch of gssp's BucketSampler rule with Python's RNG: shuffle, sort windows of
    BUCKET_WINDOW batches by (source length, target length), cut, shuffle the batches."""
    rng = random.Random(seed)
    order = list(range(len(src)))
    rng.shuffle(order)
    batches = []
    w = BUCKET_WINDOW * batch
    for k in range(0, len(order), w):
        window = sorted(order[k : k + w], key=lambda i: (len(src[i]), len(tgt[i])))
        batches += [window[j : j + batch] for j in range(0, len(window), batch)]
    rng.shuffle(batches)
    return batches


class Encoder(nn.Module):
    def __init__(self, input_dim, emb_dim, hid_dim, n_layers, dropout):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hid_dim, n_layers, dropout=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):
        _, (hidden, cell) = self.rnn(self.dropout(self.embedding(src)))
        return hidden, cell


class Decoder(nn.Module):
    def __init__(self, output_dim, emb_dim, hid_dim, n_layers, dropout):
        super().__init__()
        self.output_dim = output_dim
        self.embedding = nn.Embedding(output_dim, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hid_dim, n_layers, dropout=dropout)
        self.fc_out = nn.Linear(hid_dim, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, inp, hidden, cell):
        embedded = self.dropout(self.embedding(inp.unsqueeze(0)))
        output, (hidden, cell) = self.rnn(embedded, (hidden, cell))
        return self.fc_out(output.squeeze(0)), hidden, cell


class Seq2Seq(nn.Module):
    """The tutorial's model, step for step: the head runs at every decoder step and the next
    input is the true token with probability `teacher_forcing`, else the arg-max."""

    def __init__(self, src_vocab, tgt_vocab, emb=256, hid=512, layers=2, dropout=0.5):
        super().__init__()
        self.encoder = Encoder(src_vocab, emb, hid, layers, dropout)
        self.decoder = Decoder(tgt_vocab, emb, hid, layers, dropout)
        for p in self.parameters():
            nn.init.uniform_(p, -0.08, 0.08)

    def forward(self, src, trg, teacher_forcing=0.5):
        outputs = torch.zeros(trg.shape[0], trg.shape[1], self.decoder.output_dim,
                              device=trg.device)
        hidden, cell = self.encoder(src)
        inp = trg[0, :]
        for t in range(1, trg.shape[0]):
            output, hidden, cell = self.decoder(inp, hidden, cell)
            outputs[t] = output
            inp = trg[t] if random.random() < teacher_forcing else output.argmax(1)
        return outputs


def read_batches(path, pairs):
    """Batches of pair indices from PATH, one line each, as `gssp batches` or
    `gssp bench step --batches-out` write them."""
    try:
        with open(path) as f:
            batches = [[int(i) for i in l.split()] for l in f if l.strip()]
    except (OSError, ValueError) as e:
        raise SystemExit(f"--batches {path}: {e}")
    bad = [i for b in batches for i in b if not 0 <= i < pairs]
    if not batches or bad:
        raise SystemExit(f"--batches {path}: no batches, or pair {bad[:1]} out of range "
                         f"(train has {pairs} pairs)")
    return batches


def bench_seq2seq(args):
    """Sentences per second of the seq2seq training step (forward with teacher forcing 0.5,
    backward, clip_grad_norm 1, Adam) over real Multi30k batches, in order, cycling."""
    torch.manual_seed(0)
    random.seed(0)
    src, tgt, vs, vt = load_multi30k_train(args.data)
    if args.batches:
        batches = read_batches(args.batches, len(src))
    else:
        batches = bucket_batches(src, tgt, args.batch, 0)
    dev = torch.device(args.device)
    data = [(pad_time_major(src, b).to(dev), pad_time_major(tgt, b).to(dev)) for b in batches]
    model = Seq2Seq(vs, vt).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_ID)

    def step(k):
        s, t = data[k % len(data)]
        opt.zero_grad()
        out = model(s, t)
        loss_fn(out[1:].reshape(-1, out.shape[-1]), t[1:].reshape(-1)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    model.train()
    for k in range(min(3, len(data))):
        step(k)
    sync(dev)
    t0 = time.perf_counter()
    for k in range(args.bench_step):
        step(k)
    sync(dev)
    secs = time.perf_counter() - t0
    timed = [batches[k % len(batches)] for k in range(args.bench_step)]
    sentences = sum(len(b) for b in timed)
    tokens = sum(len(src[i]) + len(tgt[i]) for b in timed for i in b)
    params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__} seq2seq ({params} parameters, vocab de {vs} en {vt}) "
          f"batch {args.batch}, {args.threads} thread(s): {args.bench_step} steps in {secs:.2f} s")
    print(f"sentences_per_s: {sentences / secs:.1f}")
    print(f"tokens_per_s: {tokens / secs:.1f}")


EVAL_BATCH = 128
MAX_DECODE = 50


def detokenize(tokens):
    """gssp's detokenize: single spaces, except that a token of an apostrophe and more (`'s`)
    is glued to the token before it."""
    out = ""
    for t in tokens:
        if out and not (len(t) > 1 and t[0] in "'\u2019"):
            out += " "
        out += t
    return out


def seq2seq_ppl(model, src, tgt, teacher_forcing):
    """exp(summed token NLL over every non-pad target token / their count), in batches of
    EVAL_BATCH in order; teacher_forcing 1 reads the true previous token at every step."""
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(src), EVAL_BATCH):
            idx = range(i, min(i + EVAL_BATCH, len(src)))
            s, t = pad_time_major(src, idx), pad_time_major(tgt, idx)
            out = model(s, t, teacher_forcing)
            nll += nn.functional.cross_entropy(out[1:].reshape(-1, out.shape[-1]),
                                               t[1:].reshape(-1), ignore_index=PAD_ID,
                                               reduction="sum").item()
            count += (t[1:] != PAD_ID).sum().item()
    return math.exp(nll / count)


def greedy_decode(model, src):
    """Each source's arg-max translation as ids: from <sos>, the prediction fed back, up to
    MAX_DECODE tokens, ending before the first <eos>."""
    out = []
    with torch.no_grad():
        for i in range(0, len(src), EVAL_BATCH):
            idx = range(i, min(i + EVAL_BATCH, len(src)))
            hidden, cell = model.encoder(pad_time_major(src, idx))
            inp = torch.full((len(idx),), SOS_ID, dtype=torch.long)
            sents, done = [[] for _ in idx], [False] * len(idx)
            for _ in range(MAX_DECODE):
                logits, hidden, cell = model.decoder(inp, hidden, cell)
                inp = logits.argmax(1)
                for k, tok in enumerate(inp.tolist()):
                    done[k] = done[k] or tok == EOS_ID
                    if not done[k]:
                        sents[k].append(tok)
                if all(done):
                    break
            out += sents
    return out


def train_seq2seq(args):
    """Trains the tutorial's model for --epochs with one seed, then evaluates it (perplexity,
    greedy BLEU on test2016); prints the results as JSON and writes them to --json."""
    import sacrebleu

    seeds = [int(x) for x in args.seeds.split(",")]
    if len(seeds) != 1:
        raise SystemExit("--model seq2seq trains one --seed at a time")
    seed = seeds[0]
    vde, ven, src, tgt = load_multi30k(args.data)
    torch.manual_seed(seed)
    random.seed(seed)
    model = Seq2Seq(len(vde), len(ven))
    if args.save_init:
        from safetensors.torch import save_file
        save_file(model.state_dict(), args.save_init)
        print(f"initial weights (seed {seed}) written to {args.save_init}")
        return
    if args.init:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(args.init))
    given = read_batches(args.batches, len(src)) if args.batches else None
    if given is not None and args.epochs != 1:
        raise SystemExit("--batches trains one epoch: the file's batches in order (--epochs 1)")
    params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__} seq2seq: {params} parameters, vocab de {len(vde)} en "
          f"{len(ven)}, {len(src)} training pairs, batch {args.batch}, lr {args.lr}, seed {seed}, "
          f"{args.threads} thread(s)", flush=True)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_ID)
    sentences, train_s = 0, 0.0
    for epoch in range(args.epochs):
        batches = given or bucket_batches(src, tgt, args.batch, seed * 1_000_003 + epoch)
        if args.limit_batches > 0:
            batches = batches[: args.limit_batches]
        every = max(1, min(100, len(batches) // 10))
        model.train()
        t0 = time.perf_counter()
        window, window_n = 0.0, 0
        for k, b in enumerate(batches):
            s, t = pad_time_major(src, b), pad_time_major(tgt, b)
            opt.zero_grad()
            out = model(s, t, 0.5)
            loss = loss_fn(out[1:].reshape(-1, out.shape[-1]), t[1:].reshape(-1))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sentences += len(b)
            window, window_n = window + loss.item(), window_n + 1
            if (k + 1) % every == 0 or k + 1 == len(batches):
                print(f"epoch {epoch + 1} batch {k + 1}/{len(batches)}: mean loss "
                      f"{window / window_n:.4f} ({time.perf_counter() - t0:.1f} s)", flush=True)
                window, window_n = 0.0, 0
        train_s += time.perf_counter() - t0
    model.eval()
    val_de, val_en = read_pairs(args.data, "val")
    test_de, test_en = read_pairs(args.data, "test2016")

    def ids(lines, vocab):
        return encode([tokenize(l) for l in lines], vocab)

    val_src, val_tgt = ids(val_de, vde), ids(val_en, ven)
    test_src, test_tgt = ids(test_de, vde), ids(test_en, ven)
    t0 = time.perf_counter()
    val_ppl = seq2seq_ppl(model, val_src, val_tgt, 1.0)
    test_ppl = seq2seq_ppl(model, test_src, test_tgt, 1.0)
    test_ppl_free = seq2seq_ppl(model, test_src, test_tgt, 0.0)
    itos = list(ven)  # ids in order: build_vocab numbers the tokens as it lists them
    hyps = [detokenize([itos[i] for i in sent if i not in (SOS_ID, PAD_ID)])
            for sent in greedy_decode(model, test_src)]
    bleu = sacrebleu.corpus_bleu(hyps, [test_en], lowercase=True).score
    print(f"evaluation in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.translations:
        with open(args.translations, "w") as f:
            f.writelines(h + "\n" for h in hyps)
    result = {
        "model": "seq2seq", "seed": seed, "epochs": args.epochs, "batch": args.batch,
        "lr": args.lr, "train_sentences": sentences, "train_s": round(train_s, 3),
        "sentences_per_s": round(sentences / train_s, 3), "val_ppl": val_ppl,
        "test_ppl": test_ppl, "test_ppl_free_running": test_ppl_free, "bleu": bleu,
        "params": params, "src_vocab": len(vde), "tgt_vocab": len(ven),
        "threads": args.threads, "torch_version": torch.__version__,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


def run(seed, args, train, test):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build(args.model, train[0], args.width)
    opt = make_optimizer(model, args)
    n = len(train[0]) if args.train_limit == 0 else min(args.train_limit, len(train[0]))
    steps_per_epoch = n // args.batch
    total = args.epochs * steps_per_epoch
    loss_fn = nn.CrossEntropyLoss()
    test_x = normalise(test[0], args.dataset)
    step = 0
    t0 = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(n, generator=gen)
        for i in range(steps_per_epoch):
            if args.schedule == "cosine":
                for g in opt.param_groups:
                    g["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            idx = order[i * args.batch : (i + 1) * args.batch]
            x = train[0][idx]
            if args.augment == "crop-flip":
                x = crop_flip(x, gen)
            opt.zero_grad()
            loss_fn(model(normalise(x, args.dataset)), train[1][idx]).backward()
            opt.step()
            step += 1
        acc = accuracy(model, test_x, test[1])
        print(f"seed {seed} epoch {epoch + 1}: test accuracy {100 * acc:.2f}%", flush=True)
    return acc, time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["lenet5", "mlp", "resnet18", "vgg19", "seq2seq"],
                   help="default: lenet5, or what the --load file says")
    p.add_argument("--dataset", choices=sorted(MEAN_STD),
                   help="default: fashion-mnist for lenet5, cifar10 otherwise")
    p.add_argument("--data", help="folder of the official files; default: "
                   "/usr/share/datasets/fashion-mnist, or ../shared/data/<dataset>")
    p.add_argument("--augment", choices=["none", "crop-flip"],
                   help="default: crop-flip for cifar10, none otherwise")
    p.add_argument("--width", type=float, help="default: 1, or what the --load file says")
    p.add_argument("--mlp-hidden", help="hidden widths of mlp, comma-separated (default: "
                   "128, or what the --load file says)")
    p.add_argument("--seeds", "--seed", default="1",
                   help="comma-separated (seq2seq training: one)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-limit", type=int, default=0, help="first N training images (0 = all)")
    p.add_argument("--test-limit", type=int, default=0,
                   help="first N test images (0 = all), as gssp's data.test_limit")
    p.add_argument("--batch", type=int, help="default: 32 for seq2seq, 64 otherwise")
    p.add_argument("--lr", type=float, help="default: 1e-3 (Adam) for seq2seq, 0.05 otherwise")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="--bench-step only: where the model and its batches live")
    p.add_argument("--bench-step", type=int, default=0, metavar="STEPS",
                   help="only time STEPS training steps and print images_per_s")
    p.add_argument("--batches", metavar="FILE",
                   help="seq2seq: the batches to time (--bench-step) or to train one epoch on, "
                   "one line of pair indices each, as gssp batches or gssp bench step "
                   "--batches-out write them")
    p.add_argument("--init", metavar="FILE",
                   help="seq2seq training: start from these weights (a safetensors state_dict)")
    p.add_argument("--save-init", metavar="FILE",
                   help="seq2seq: only write the seed's initial weights to FILE (safetensors), "
                   "for gssp's model.init_file")
    p.add_argument("--json", metavar="FILE", help="seq2seq training: write the results here")
    p.add_argument("--translations", metavar="FILE",
                   help="seq2seq training: write the greedy test2016 translations here")
    p.add_argument("--limit-batches", type=int, default=0, metavar="N",
                   help="seq2seq training: only the first N batches of each epoch (0 = all)")
    p.add_argument("--load", metavar="FILE",
                   help="only evaluate FILE, a model.safetensors gssp exported, on the test set")
    args = p.parse_args()
    meta = file_metadata(args.load) if args.load else {}
    if args.model is None:
        args.model = meta.get("model", "lenet5")
    if args.width is None:
        args.width = float(meta.get("width", 1.0))
    if args.mlp_hidden is None:
        args.mlp_hidden = meta.get("mlp_hidden", "128").strip("[]")
    args.mlp_hidden = [int(h) for h in args.mlp_hidden.split(",") if h.strip()]
    if args.dataset is None and "dataset" in meta:
        args.dataset = meta["dataset"]
    if args.model == "seq2seq":
        args.batch = args.batch or 32
        args.lr = 1e-3 if args.lr is None else args.lr
        torch.set_num_threads(args.threads)
        args.data = args.data or os.path.join("..", "shared", "data", "multi30k")
        if args.bench_step > 0:
            bench_seq2seq(args)
        else:
            train_seq2seq(args)
        return
    args.batch = args.batch or 64
    args.lr = 0.05 if args.lr is None else args.lr
    if args.model == "mlp" and not args.load:
        raise SystemExit("--model mlp is only for --load")
    if args.dataset is None:
        args.dataset = "fashion-mnist" if args.model == "lenet5" else "cifar10"
    if args.augment is None:
        args.augment = "crop-flip" if args.dataset == "cifar10" else "none"
    if args.data is None:
        args.data = ("/usr/share/datasets/fashion-mnist" if args.dataset == "fashion-mnist"
                     else os.path.join("..", "shared", "data", args.dataset))
    torch.set_num_threads(args.threads)
    if args.load:
        test = load(args.dataset, args.data, False)
        if args.test_limit > 0:
            test = (test[0][: args.test_limit], test[1][: args.test_limit])
        evaluate_file(args, test)
        return
    train = load(args.dataset, args.data, True)
    if args.bench_step > 0:
        bench_step(args, train)
        return
    test = load(args.dataset, args.data, False)
    if args.test_limit > 0:
        test = (test[0][: args.test_limit], test[1][: args.test_limit])
    finals = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        acc, secs = run(seed, args, train, test)
        finals.append(acc)
        print(f"seed {seed}: final test accuracy {100 * acc:.2f}% in {secs:.1f} s ({args.model}, "
              f"{args.dataset}, batch {args.batch}, lr {args.lr} {args.schedule}, momentum "
              f"{args.momentum}, weight decay {args.weight_decay}, augment {args.augment}, "
              f"{args.epochs} epochs)", flush=True)
    print(f"median final test accuracy over {len(finals)} seeds: "
          f"{100 * statistics.median(finals):.2f}%")


if __name__ == "__main__":
    main()
