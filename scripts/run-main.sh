#!/usr/bin/env bash
# The main job end to end on a fresh Debian/Ubuntu machine: installs what is missing
# (OpenMPI, OpenBLAS, the dataset-fashion-mnist package), builds, then trains LeNet-5 on
# Fashion-MNIST with GSSP + GDTopK (configs/fashion_mnist_gssp.toml) under mpirun.
# Extra arguments are passed as --set overrides, e.g. ./scripts/run-main.sh run.epochs=0.1
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# shellcheck source=scripts/env.sh
source scripts/env.sh

config=configs/fashion_mnist_gssp.toml
out=runs/fashion_mnist_gssp
# The world size the config is written for: its `# ranks: N` line.
ranks=$(sed -n 's/^#[[:space:]]*ranks:[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' "$config" | head -n 1)
if [ -z "$ranks" ]; then
    echo "run-main: $config has no '# ranks: N' line" >&2
    exit 2
fi
overrides=()
for kv in "$@"; do
    overrides+=(--set "$kv")
done

echo "run-main: mpirun -n $ranks --bind-to none target/release/gssp train --config $config --out $out ${overrides[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
mpirun -n "$ranks" --bind-to none target/release/gssp train --config "$config" --out "$out" \
    "${overrides[@]}" 2>&1 | tee "$log" || status=$?
if [ "$status" -ne 0 ]; then
    echo "run-main: training failed (exit status $status); see the messages above" >&2
    exit "$status"
fi
echo
echo "result: $(grep -E '^gssp .* test accuracy' "$log" | tail -n 1)"
echo "run directory: $PWD/$out (summary.json, eval.csv, layout.json, rank-<r>.csv, config.toml, model.safetensors, checkpoints/)"
