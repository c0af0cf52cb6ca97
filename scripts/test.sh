#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit tests, gradient
# checks, real-data tests against ../shared/data, multi-rank tests under mpirun). At the
# end it lists, one line each, the tests that could not run here and why (no GPU, no
# tmpfs): `cargo test` hides what they print.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Every kernel in kernels/ must compile with NVRTC (no GPU needed): with NVRTC installed,
# the tests that compile them fail, rather than skip, when it cannot be loaded. Where the
# wheel cannot be had (no network, not x86_64) they are skipped, saying why; CI installs it
# first (.ci/run), so there a kernel that does not compile fails the run.
if ./scripts/nvrtc.sh >/dev/null; then
    export GSSP_REQUIRE_NVRTC=1
else
    echo "test.sh: NVRTC could not be installed; the CUDA kernel compile checks will be skipped" >&2
fi
source scripts/env.sh
GSSP_SKIPPED_LOG=$(mktemp)
export GSSP_SKIPPED_LOG
list_skipped() {
    if [ -s "$GSSP_SKIPPED_LOG" ]; then
        tests=$(cut -d: -f1 "$GSSP_SKIPPED_LOG" | sort -u | wc -l)
        echo "test.sh: $tests test(s) could not run here in full:"
        sort -u "$GSSP_SKIPPED_LOG" | sed 's/^/  skipped: /'
    else
        echo "test.sh: no test skipped"
    fi
    rm -f "$GSSP_SKIPPED_LOG"
}
trap list_skipped EXIT
cargo test --release "$@"
