#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs to run on a GPU node that cannot build or download
# (cluster compute nodes often have no internet, no Rust and no compiler toolchain): the
# stripped gssp binary and CUDA test binaries, the shared libraries they link beyond glibc
# (OpenMPI's, OpenBLAS, gfortran), and the data the checks read. Run it where the project
# builds (a login node), then copy the folder next to the checkout on the GPU node:
#
#   ./scripts/gpu-pack.sh                 # -> gpu-pack/ (about 50 MB)
#   ./scripts/gpu-check.sh                # on the GPU node: uses gpu-pack/ when it is there
#
# Data (real files in their official formats): MNIST=DIR, MULTI30K=DIR, CIFAR=DIR, default
# ../shared/data/{mnist,multi30k,cifar10}. CIFAR-10 is cut to its first 1,000 training and
# 1,000 test images (the step benchmarks read one batch).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=${1:-gpu-pack}
MNIST=${MNIST:-../shared/data/mnist}
MULTI30K=${MULTI30K:-../shared/data/multi30k}
CIFAR=${CIFAR:-../shared/data/cifar10}
for d in "$MNIST" "$MULTI30K" "$CIFAR"; do
    [ -d "$d" ] || { echo "gpu-pack: data folder $d is missing (set MNIST, MULTI30K, CIFAR)" >&2; exit 2; }
done
./scripts/setup.sh
source scripts/env.sh
rm -rf "$PACK"
libs=$(mktemp -d)
mkdir -p "$PACK/bin" "$PACK/data/cifar10"
# The test executable cargo builds for a target (the artifact of the test profile).
test_exe() {
    cargo test --release --no-run --message-format=json "$@" | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])'
}
cargo build --release
strip -o "$PACK/bin/gssp" target/release/gssp
strip -o "$PACK/bin/cuda_parity" "$(test_exe --test cuda_parity)"
strip -o "$PACK/bin/mpi_cuda" "$(test_exe --test mpi_cuda)"
strip -o "$PACK/bin/lib_tests" "$(test_exe --lib)"
# Shared libraries beyond glibc and the compiler runtime, by soname; gpu-check.sh drops the
# MPI ones where the node has its own OpenMPI (its mpirun and plugins must match).
for b in "$PACK"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        case $name in
            libc.so* | libm.so* | libgcc_s.so* | ld-linux* | libpthread* | libdl* | librt* | libz.so*) ;;
            *) cp -L "$path" "$libs/$name" ;;
        esac
    done
# Compressed: OpenBLAS alone is 37 MB.
tar czf "$PACK/lib.tar.gz" -C "$libs" .
rm -rf "$libs"
cp -r --no-preserve=mode "$MNIST" "$PACK/data/mnist"
cp -r --no-preserve=mode "$MULTI30K" "$PACK/data/multi30k"
# 3,073 bytes per CIFAR-10 record (label and 32x32x3 image).
head -c $((3073 * 1000)) "$CIFAR/data_batch_1.bin" > "$PACK/data/cifar10/data_batch_1.bin"
test_file=$(find "$CIFAR" -maxdepth 1 -name 'test_batch*.bin' | sort | head -n 1)
head -c $((3073 * 1000)) "$test_file" > "$PACK/data/cifar10/test_batch.bin"
git rev-parse HEAD > "$PACK/commit.txt" 2>/dev/null || true
du -sh "$PACK"
