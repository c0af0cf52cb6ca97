#!/usr/bin/env bash
# Installs what gssp needs on Debian/Ubuntu (only what is missing) and builds it.
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential pkg-config libclang-dev clang libopenmpi-dev openmpi-bin libopenblas-dev dataset-fashion-mnist curl ca-certificates unzip)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
if ! command -v cargo >/dev/null 2>&1; then
    missing+=(cargo rustc)
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Rust: the distribution's toolchain is installed above when there is none; gssp needs
# 1.87 or newer.
need=87
have=$(rustc --version 2>/dev/null | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if [ -z "$have" ] || [ "$have" -lt "$need" ]; then
    echo "setup: gssp needs Rust 1.$need or newer, found $(rustc --version 2>/dev/null || echo none);" \
         "install a current toolchain with rustup (https://rustup.rs) and rerun" >&2
    exit 1
fi
cargo build --release --quiet
