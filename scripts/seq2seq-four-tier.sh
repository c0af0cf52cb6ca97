#!/usr/bin/env bash
# The four-tier seq2seq figure: bsp and gssp with GDTopK on configs/seq2seq_multi30k_gssp.toml
# (8 workers in tiers 1x-4x, width 0.25, 240 s each), once per seed, then `gssp report` per
# seed with bsp as the baseline: its Translation table gives the time each run took to reach
# bsp's val perplexity at the budget, and the speed-up. About 10 minutes per seed; run on an
# otherwise idle machine (the tiers are wall-clock pacing).
#
#   ./scripts/seq2seq-four-tier.sh             # seeds 1 2 3, under runs/s2s-four-tier
#   SEEDS="1" OUT=/tmp/4t ./scripts/seq2seq-four-tier.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-1 2 3}
OUT=${OUT:-runs/s2s-four-tier}
./scripts/setup.sh
source scripts/env.sh
export OPENBLAS_NUM_THREADS=1
bin=target/release/gssp
cfg=configs/seq2seq_multi30k_gssp.toml
for s in $SEEDS; do
    mpirun -n 9 --bind-to none "$bin" train --config "$cfg" --set sync.mode=bsp \
        --set run.seed="$s" --out "$OUT/seed$s/bsp"
    mpirun -n 12 --bind-to none "$bin" train --config "$cfg" --set run.seed="$s" \
        --out "$OUT/seed$s/gssp"
    "$bin" report "$OUT/seed$s/bsp" "$OUT/seed$s/gssp" --baseline bsp --out "$OUT/seed$s/report"
    sed -n '/^## Translation/,/^Val perplexity at/p' "$OUT/seed$s/report/report.md"
done
