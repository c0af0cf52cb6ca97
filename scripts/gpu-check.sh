#!/usr/bin/env bash
# The GPU check, on a node with an NVIDIA GPU and driver (at most about 8 minutes on an
# H200): builds gssp with the `cuda` feature, runs the CUDA parity tests (every kernel
# against the CPU backend, top-k's index set, one training step of lenet5, resnet18 and
# seq2seq on both backends) and the distributed modes with their workers on the GPU
# (tests/mpi_cuda.rs: asp, gssp, allreduce and localsgd under mpirun), then times the
# training step of lenet5, resnet18, vgg19 (batch 128) and seq2seq (batch 32) on the CUDA
# backend and in PyTorch eager on the same GPU, and top-k of 11.2 million floats at 1%
# against a device-to-device copy.
# Prints a table; the raw outputs go to $OUT (default runs/gpu-check).
#
#   ./scripts/gpu-check.sh
#   SECONDS_PER=5 DATA=/scratch/multi30k CIFAR=/scratch/cifar10 ./scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu-check}
DATA=${DATA:-../shared/data/multi30k}
CIFAR=${CIFAR:-../shared/data/cifar10}    # the PyTorch side reads its images from here
SECONDS_PER=${SECONDS_PER:-10}
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
./scripts/setup.sh
./scripts/nvrtc.sh >/dev/null
source scripts/env.sh
export GSSP_REQUIRE_GPU=1 GSSP_REQUIRE_NVRTC=1
echo "== parity tests"
cargo test --release --test cuda_parity 2>&1 | tee "$OUT/parity.txt"
cargo test --release --lib backend::cuda 2>&1 | tee -a "$OUT/parity.txt"
echo "== distributed modes with their workers on the GPU"
cargo test --release --test mpi_cuda 2>&1 | tee "$OUT/mpi.txt"
# The PyPI wheel of torch is the CUDA build; the same cache venv serves CPU and GPU.
PY=$(./scripts/install_torch_cpu.sh | tail -n 1)
row() { printf "| %s | %s | %s | %s |\n" "$@" | tee -a "$OUT/table.md"; }
echo "| model | gssp (CUDA) | PyTorch eager | gssp / PyTorch |" > "$OUT/table.md"
echo "|---|---:|---:|---:|" >> "$OUT/table.md"
for m in lenet5 resnet18 vgg19 seq2seq; do
    batch=128
    [ "$m" = seq2seq ] && batch=32
    echo "== $m, batch $batch"
    target/release/gssp bench step --device cuda --model "$m" --batch "$batch" \
        --seconds "$SECONDS_PER" --data "$DATA" > "$OUT/gssp-$m.txt"
    steps=200
    [ "$m" = seq2seq ] && steps=100
    case $m in
        seq2seq) extra=(--data "$DATA") ;;
        resnet18|vgg19) extra=(--data "$CIFAR") ;;
        *) extra=() ;;
    esac
    "$PY" scripts/pytorch_reference.py --device cuda --model "$m" --batch "$batch" \
        --bench-step "$steps" "${extra[@]}" > "$OUT/torch-$m.txt"
    key=images_per_s
    [ "$m" = seq2seq ] && key=sentences_per_s
    ours=$(awk -v k="$key:" '$1 == k {print $2}' "$OUT/gssp-$m.txt")
    theirs=$(awk -v k="$key:" '$1 == k {print $2}' "$OUT/torch-$m.txt")
    row "$m ($key)" "$ours" "$theirs" "$(awk -v a="$ours" -v b="$theirs" 'BEGIN {printf "%.2f", a / b}')"
done
echo "== top-k"
target/release/gssp bench topk --device cuda --n 11200000 --ratio 0.01 | tee "$OUT/topk.txt"
echo "results in $OUT"
