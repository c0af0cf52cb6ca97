#!/usr/bin/env python3
"""Where one process's training step spends its time, by layer kind, from a perf recording.

Reads `perf script` output of `gssp bench step` recorded with DWARF call graphs and sorts each
sample of the step (stacks under `ComputeStep::compute` or the optimizer step; set-up is left
out) into one kind by its leaf function and the frames above it:

- `conv fwd GEMM`, `conv dW GEMM`, `conv dX GEMM`: OpenBLAS under conv2d_forward, or under
  conv2d_backward as sgemm_tn (dW = dY col^T, row-major NT) or sgemm_nt (dcol = W^T dY),
  packing (`*copy*` kernels) included;
- `unfold (im2col)`, `fold (col2im)`, `Winograd transforms`, `conv copies`: the unfold, the
  fold, Winograd's tile and filter transforms, and the copies and fills inside the
  convolution (chunk scatter and gather, zeroing dX);
- `batch norm`, `ReLU`, `pooling`, `linear`, `loss`, `optimizer`, `residual add`, `batch fill`,
  `kernel` (page faults, scheduling), `other`.

    perf record -F 499 -g --call-graph dwarf,16384 -o /tmp/p.data \\
        target/release/gssp bench step --model resnet18 --batch 32 --threads 1 --seconds 8
    perf script -i /tmp/p.data > /tmp/p.txt && python3 scripts/step_profile.py /tmp/p.txt

Prints one row per kind: samples and share of the step, then the share that ran on the
worker's pool (under `threads::` frames: `run`, `for_ranges`, `for_values`, or under the
im2col chunks that `run` hands out, whose `run` frame a tail call hides at one thread); the
rest ran on the calling thread alone whatever `run.threads` is. Record at `--threads 1` for that split:
at more threads the helpers' samples lie outside the step's stacks.
"""

import collections
import sys

# (kind, test on the stack's frames from the leaf up); the first that matches wins.
KINDS = [
    ("batch fill", lambda f: any("data::" in x or "Corpus" in x or "augment" in x for x in f)
     and not any("conv2d" in x for x in f)),
    ("optimizer", lambda f: any("sgd_step" in x or "adam_step" in x or "optim::" in x for x in f)),
    ("conv fwd GEMM", lambda f: is_gemm(f) and has(f, "conv2d_forward")),
    ("conv dW GEMM", lambda f: is_gemm(f) and has(f, "conv2d_backward") and has(f, "sgemm_tn")),
    ("conv dX GEMM", lambda f: is_gemm(f) and has(f, "conv2d_backward") and has(f, "sgemm_nt")),
    ("linear", lambda f: has(f, "linear_forward") or has(f, "linear_backward")),
    ("unfold (im2col)", lambda f: leaf_gssp(f).endswith("im2col")
     or leaf_gssp(f).endswith("im2col_same")),
    ("fold (col2im)", lambda f: leaf_gssp(f).endswith("col2im")),
    ("Winograd transforms", lambda f: "winograd" in leaf_gssp(f)),
    ("conv copies", lambda f: "conv2d_" in leaf_gssp(f)),
    ("batch norm", lambda f: "norm::" in leaf_gssp(f) or "BatchNorm" in leaf_gssp(f)),
    ("ReLU", lambda f: "relu" in leaf_gssp(f) or "Relu" in leaf_gssp(f)),
    ("pooling", lambda f: "pool" in leaf_gssp(f) or "Pool" in leaf_gssp(f)),
    ("loss", lambda f: "softmax" in leaf_gssp(f)),
    ("residual add", lambda f: "Residual" in leaf_gssp(f) or leaf_gssp(f).endswith("::add")),
    ("kernel", lambda f: f and f[0].endswith("[k]")),
]


# Frames of work on the pool.
POOL_FRAMES = (
    "gssp::compute::backend::cpu::threads::",
    "gssp::compute::backend::cpu::conv::forward_chunk",
    "gssp::compute::backend::cpu::conv::backward_chunk",
)


def has(frames, name):
    return any(name in x for x in frames)


def is_gemm(frames):
    return any(x.startswith("sgemm_") or "cblas_sgemm" in x for x in frames)


def leaf_gssp(frames):
    """The innermost frame of gssp's own code (inlined frames included)."""
    for x in frames:
        if "gssp::" in x:
            return x.split("+0x")[0]
    return ""


def samples(lines):
    """Each sample's frames, leaf first, as `function` (kernel frames end in ` [k]`)."""
    frames = None
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = None
        elif not line.startswith((" ", "\t")):
            frames = []
        elif frames is not None:
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                sym = parts[1]
                kernel = "([kernel.kallsyms])" in sym
                sym = sym.rsplit(" (", 1)[0]
                frames.append(sym + (" [k]" if kernel else ""))
    if frames:
        yield frames


def in_step(frames):
    return has(frames, "ComputeStep<B>::compute") or has(frames, "NetworkSgd")


def main():
    counts = collections.Counter()
    pooled = 0
    with open(sys.argv[1], errors="replace") as f:
        for frames in samples(f):
            if not in_step(frames):
                continue
            kind = next((k for k, test in KINDS if test(frames)), "other")
            counts[kind] += 1
            pooled += any(x.startswith(POOL_FRAMES) for x in frames)
    total = sum(counts.values())
    print(f"{'kind':<18} {'samples':>8} {'share':>7}")
    for kind, n in counts.most_common():
        print(f"{kind:<18} {n:>8} {100 * n / total:>6.1f}%")
    print(f"{'step':<18} {total:>8} {100.0:>6.1f}%")
    print(f"{'on the pool':<18} {pooled:>8} {100 * pooled / total:>6.1f}%")


if __name__ == "__main__":
    main()
