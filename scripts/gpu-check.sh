#!/usr/bin/env bash
# The GPU check, on a node with an NVIDIA GPU and driver (about 5 minutes on an H200 from a
# pack, plus the build where it builds): the CUDA parity tests (every kernel against the CPU
# backend, top-k's index set, one training step of lenet5, resnet18 and seq2seq on both
# backends), the training step of lenet5, resnet18, vgg19 (batch 128) and seq2seq (batch 32)
# on the CUDA backend and in PyTorch eager on the same GPU, top-k of 11.2 million floats at
# 1% against a device-to-device copy, a sparse exchange's selection on the host against the
# GPU at four model sizes, the CUDA unit tests (NVRTC compiles every kernel), and
# the distributed modes with their workers on the GPU (tests/mpi_cuda.rs, under mpirun).
#
#   ./scripts/gpu-check.sh               # node that builds: packs first (scripts/gpu-pack.sh)
#   ./scripts/gpu-check.sh               # offline node: uses gpu-pack/ copied from a login node
#   PACK=/scratch/gpu-pack OUT=/scratch/gpu-out ./scripts/gpu-check.sh
#
# No step stops the others; each has a time limit, and all of them share BUDGET seconds
# (default 450). $OUT (default runs/gpu-check) gets four files: log.txt (every step's output,
# appended as it runs), summary.txt (PASS, FAIL or SKIP per step), table.md and env.txt.
# PyTorch: the first python3 that imports torch with CUDA (PYTHON=... to choose); failing
# that, where the network allows, scripts/install_torch_cpu.sh's cache venv (the PyPI wheel
# is the CUDA build); failing that, its rows are skipped. Exit status 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=${PACK:-gpu-pack}
OUT=${OUT:-runs/gpu-check}
BUDGET=${BUDGET:-450}
SECONDS_PER=${SECONDS_PER:-10}
export HOME=${HOME:-/root} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
: > "$OUT/log.txt"
: > "$OUT/summary.txt"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gssp-gpu-check.XXXXXX")
note() { echo "$1" | tee -a "$OUT/summary.txt"; }

if [ ! -x "$PACK/bin/gssp" ]; then
    echo "== no pack in $PACK: building one (scripts/gpu-pack.sh)"
    ./scripts/gpu-pack.sh "$PACK" >> "$OUT/log.txt" 2>&1 || {
        note "FAIL pack: scripts/gpu-pack.sh (see log.txt)"
        exit 1
    }
    ./scripts/nvrtc.sh > /dev/null 2>&1 || true
fi
SECONDS=0
PACK=$(cd "$PACK" && pwd)

# step NAME LIMIT CMD...: runs CMD under a time limit (cut to what is left of the budget),
# appends its output to log.txt, and records PASS or FAIL.
step() {
    local name=$1 limit=$2 left rc
    shift 2
    left=$((BUDGET - SECONDS))
    if [ "$left" -lt 15 ]; then
        note "SKIP $name: the budget of ${BUDGET}s is spent"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s, at ${SECONDS}s)"
    timeout -k 5 "$limit" "$@" > "$WORK/$name.txt" 2>&1
    rc=$?
    { echo "==== $name: exit $rc at ${SECONDS}s"; cat "$WORK/$name.txt"; } >> "$OUT/log.txt"
    tail -n 8 "$WORK/$name.txt"
    if [ $rc -eq 0 ]; then note "PASS $name (${SECONDS}s)"; else note "FAIL $name: exit $rc (${SECONDS}s)"; fi
    return $rc
}

# Libraries for the gssp processes only (a python keeps its own): the pack's, without its
# MPI where the node has OpenMPI (mpirun, its daemons and plugins must match the libmpi the
# ranks load); cuBLAS and NVRTC 13 from a CUDA toolkit, NVRTC's cache (scripts/nvrtc.sh), or
# the nvidia wheels of a python that has them (PyTorch's).
mkdir -p "$WORK/lib"
tar xzf "$PACK/lib.tar.gz" -C "$WORK/lib" || note "FAIL unpacking $PACK/lib.tar.gz"
have_mpi=0
if command -v mpirun > /dev/null && ldconfig -p | grep -q 'libmpi\.so\.40 '; then
    have_mpi=1
    rm -f "$WORK"/lib/libmpi.so* "$WORK"/lib/libopen-rte.so* "$WORK"/lib/libopen-pal.so* \
        "$WORK"/lib/libhwloc.so* "$WORK"/lib/libevent*
fi
PYTHON=${PYTHON:-python3}
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    "${GSSP_CACHE:-$HOME/.cache/gssp}/nvrtc-13.0.88/nvidia/cu13/lib" \
    $("$PYTHON" -c 'import os, nvidia; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cu13", "cublas", "cuda_nvrtc")))' 2> /dev/null); do
    if [ -e "$d/libcublas.so.13" ] || [ -e "$d/libnvrtc.so.13" ]; then cuda_dirs="$cuda_dirs:$d"; fi
done
LIBS="$WORK/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
source scripts/env.sh
export GSSP_REQUIRE_GPU=1 GSSP_REQUIRE_NVRTC=1 GSSP_TEST_DATA="$PACK/data" GSSP_TEST_BIN="$PACK/bin/gssp"
# The gssp processes' environment (a prefix for `step`, which runs programs, not functions).
G=(env LD_LIBRARY_PATH="$LIBS")
{
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    grep PRETTY /etc/os-release
    echo "cores: $(nproc); pack: $PACK (commit $(cat "$PACK/commit.txt" 2> /dev/null)); system OpenMPI: $have_mpi"
    echo "gssp library path: $LIBS"
    for b in "$PACK"/bin/*; do
        missing=$(LD_LIBRARY_PATH=$LIBS ldd "$b" | grep 'not found')
        [ -n "$missing" ] && echo "$b: $missing"
    done
    LD_LIBRARY_PATH=$LIBS "$PYTHON" - << 'PY'
import ctypes
for name in ("libcuda.so.1", "libcublas.so.13", "libnvrtc.so.13"):
    try:
        ctypes.CDLL(name)
        print(name, "loads")
    except OSError as e:
        print(name, "MISSING:", e)
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step parity 180 "${G[@]}" "$PACK/bin/cuda_parity"
batch() { if [ "$1" = seq2seq ]; then echo 32; else echo 128; fi; }
for m in lenet5 resnet18 vgg19 seq2seq; do
    step "gssp-$m" 60 "${G[@]}" "$PACK/bin/gssp" bench step --device cuda --model "$m" \
        --batch "$(batch "$m")" --seconds "$SECONDS_PER" --data "$PACK/data/multi30k"
done
step topk 60 "${G[@]}" "$PACK/bin/gssp" bench topk --device cuda --n 11200000 --ratio 0.01
# Where a GPU group server would start to pay: the exchange's selection on the host against
# the GPU (exchange_device_over_host) at LeNet-5's, 1M, ResNet-18's and VGG-19's sizes.
for n in 61706 1000000 11200000 20000000; do
    step "exchange-$n" 60 "${G[@]}" "$PACK/bin/gssp" bench topk --device cuda --n "$n" --ratio 0.015
done

torch_ok() { "$1" -c 'import numpy, torch; assert torch.cuda.is_available()' > /dev/null 2>&1; }
if ! torch_ok "$PYTHON"; then
    PYTHON=$(timeout 240 ./scripts/install_torch_cpu.sh 2>> "$OUT/log.txt" | tail -n 1)
fi
if [ -n "$PYTHON" ] && torch_ok "$PYTHON"; then
    for m in lenet5 resnet18 vgg19 seq2seq; do
        case $m in
            lenet5) extra=(--dataset mnist --data "$PACK/data/mnist") steps=200 ;;
            seq2seq) extra=(--data "$PACK/data/multi30k") steps=100 ;;
            *) extra=(--data "$PACK/data/cifar10") steps=200 ;;
        esac
        step "torch-$m" 120 "$PYTHON" scripts/pytorch_reference.py --device cuda --model "$m" \
            --batch "$(batch "$m")" --bench-step "$steps" "${extra[@]}"
    done
else
    note "SKIP torch: no python with PyTorch seeing the GPU, and none could be installed"
fi

step lib-cuda 120 "${G[@]}" "$PACK/bin/lib_tests" backend::cuda
if [ $have_mpi = 1 ]; then
    step mpi-cuda 300 "${G[@]}" "$PACK/bin/mpi_cuda" --test-threads 1
else
    note "SKIP mpi-cuda: no OpenMPI 4 (mpirun and libmpi.so.40) on this node"
fi

{
    echo "| model | gssp (CUDA) | PyTorch eager | gssp / PyTorch |"
    echo "|---|---:|---:|---:|"
    for m in lenet5 resnet18 vgg19 seq2seq; do
        key=images_per_s
        [ "$m" = seq2seq ] && key=sentences_per_s
        ours=$(awk -v k="$key:" '$1 == k {print $2}' "$WORK/gssp-$m.txt" 2> /dev/null)
        theirs=$(awk -v k="$key:" '$1 == k {print $2}' "$WORK/torch-$m.txt" 2> /dev/null)
        ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
        echo "| $m ($key) | ${ours:--} | ${theirs:--} | $ratio |"
    done
} > "$OUT/table.md"
echo "== summary"
cat "$OUT/summary.txt" "$OUT/table.md"
echo "results in $OUT (the step outputs in $OUT/log.txt)"
rm -rf "$WORK"
! grep -q '^FAIL' "$OUT/summary.txt"
