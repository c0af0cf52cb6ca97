#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit tests, gradient
# checks, real-data tests against ../shared/data, multi-rank tests under mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
cargo test --release "$@"
