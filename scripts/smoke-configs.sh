#!/usr/bin/env bash
# Starts every shipped config (configs/*.toml) as its header says: on its declared rank
# count (the header's "# ranks: N" line; none: one process) with nothing overridden, on the
# simulated clock where the header says "# clock: simulated" (gssp train --simulate), and
# stops it once it trains (a rank's log holds its first row). Fails, showing the end of the
# job's output, for a config that stops with an error or has not trained within
# GSSP_SMOKE_LIMIT_S seconds (default 180). A smoke start, not a training run: CI proves
# with it that no shipped config is broken. Run from anywhere; builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
limit=${GSSP_SMOKE_LIMIT_S:-180}
bin=target/release/gssp
[ -x "$bin" ] || { echo "smoke-configs: $bin is missing: run ./scripts/setup.sh first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Whether the run in $1 has logged a training row: a rank log with a row under its header.
trained() {
    local f
    for f in "$1"/rank-*.csv; do
        [ -f "$f" ] && [ "$(head -n 2 "$f" | wc -l)" -ge 2 ] && return 0
    done
    return 1
}

# Ends the job $1 (mpirun forwards the signal to its ranks), and any rank left of it.
stop() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    pkill -KILL -f -- "--out $2" 2>/dev/null || true
}

failed=()
for config in configs/*.toml; do
    name=$(basename "$config" .toml)
    ranks=$(sed -n 's/^# ranks: *\([0-9][0-9]*\).*/\1/p' "$config" | head -n 1)
    dir="$out/$name"
    cmd=("$bin" train --config "$config" --out "$dir")
    if grep -q '^# clock: simulated' "$config"; then
        cmd+=(--simulate ${ranks:+--ranks "$ranks"})
    elif [ -n "$ranks" ]; then
        cmd=(mpirun -n "$ranks" --oversubscribe --bind-to none "${cmd[@]}")
    fi
    start=$SECONDS
    "${cmd[@]}" >"$out/$name.log" 2>&1 &
    job=$!
    result=""
    while [ -z "$result" ]; do
        if trained "$dir"; then
            result="trains"
        elif ! kill -0 "$job" 2>/dev/null; then
            if wait "$job"; then result="finished"; else result="FAILED (exit $?)"; fi
        elif (( SECONDS - start >= limit )); then
            result="FAILED (no training row in ${limit} s)"
        else
            sleep 0.5
        fi
    done
    stop "$job" "$dir"
    echo "smoke-configs: $config on ${ranks:-1} rank(s): $result after $((SECONDS - start)) s"
    if [[ $result == FAILED* ]]; then
        failed+=("$config")
        tail -n 20 "$out/$name.log" | sed 's/^/    /'
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "smoke-configs: ${#failed[@]} config(s) do not start: ${failed[*]}" >&2
    exit 1
fi
echo "smoke-configs: every shipped config starts"
