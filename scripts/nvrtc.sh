#!/usr/bin/env bash
# Installs NVRTC (NVIDIA's runtime compiler, from the `nvidia-cuda-nvrtc` wheel on PyPI)
# into a cache, so that kernels/*.cu compile to PTX on any machine, a GPU or not: CI
# compiles every kernel with it, and a GPU node without a CUDA toolkit uses it at start-up.
# Idempotent; prints the library folder on its last line (scripts/env.sh puts it on
# LD_LIBRARY_PATH). About 90 MB, downloaded once.
#
# The version is pinned to CUDA 13.0: NVRTC writes PTX of its own ISA version, which a
# driver older than the compiler cannot load (driver 580 is CUDA 13.0), and 13.0 PTX runs
# on every later driver.
#
#   ./scripts/nvrtc.sh                      # cache at ~/.cache/gssp/nvrtc-13.0.88
#   GSSP_CACHE=/scratch/cache ./scripts/nvrtc.sh
set -euo pipefail
VERSION=13.0.88
WHEEL=nvidia_cuda_nvrtc-$VERSION-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl
URL=https://files.pythonhosted.org/packages/c3/68/483a78f5e8f31b08fb1bb671559968c0ca3a065ac7acabfc7cee55214fd6/$WHEEL
SHA256=ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575
DIR=${GSSP_CACHE:-$HOME/.cache/gssp}/nvrtc-$VERSION
LIB=$DIR/nvidia/cu13/lib
if [ -f "$LIB/libnvrtc.so.13" ] && [ -f "$DIR/.complete" ]; then
    echo "$LIB"
    exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
    echo "nvrtc: this script fetches the x86_64 wheel; on $(uname -m) install NVRTC 13.0 from a CUDA toolkit" >&2
    exit 1
fi
for tool in curl unzip sha256sum; do
    command -v "$tool" >/dev/null || { echo "nvrtc: needs $tool (scripts/setup.sh installs it)" >&2; exit 1; }
done
mkdir -p "$DIR"
tmp=$(mktemp "$DIR/wheel.XXXXXX")
trap 'rm -f "$tmp"' EXIT
echo "nvrtc: downloading $WHEEL" >&2
curl -fsSL --retry 3 -o "$tmp" "$URL"
echo "$SHA256  $tmp" | sha256sum -c --quiet - || { echo "nvrtc: checksum mismatch for $URL" >&2; exit 1; }
unzip -q -o "$tmp" 'nvidia/cu13/lib/*' -d "$DIR"
touch "$DIR/.complete"
echo "$LIB"
