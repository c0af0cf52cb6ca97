#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit tests, gradient
# checks, real-data tests against ../shared/data, multi-rank tests under mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Every kernel in kernels/ must compile with NVRTC (no GPU needed): the test that compiles
# them fails, rather than skips, when GSSP_REQUIRE_NVRTC is set.
./scripts/nvrtc.sh >/dev/null
export GSSP_REQUIRE_NVRTC=1
source scripts/env.sh
cargo test --release "$@"
