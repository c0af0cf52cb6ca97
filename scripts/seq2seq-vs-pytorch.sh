#!/usr/bin/env bash
# One epoch of seq2seq on Multi30k in one process, gssp against the PyTorch reference with
# the same tokenizer, vocabularies and recipe, side by side (both at once, one thread each),
# once per seed; prints each run's test2016 perplexity, BLEU and sentences/s, and the
# medians. About 15 minutes per seed on 2 cores. Needs ../shared/data/multi30k (or
# DATA=...) and CPU PyTorch (scripts/install_torch_cpu.sh installs it into a cache venv).
#
# By default both sides start from the same initial weights (PyTorch's for the seed, which
# gssp reads through model.init_file) and train on the same batch sequence (gssp's for the
# seed, written by `gssp batches`, read by the reference's --batches): what differs is the
# implementation and the dropout and teacher-forcing draws. INDEPENDENT=1 lets each side
# initialise and bucket from its own seeded streams instead.
#
#   ./scripts/seq2seq-vs-pytorch.sh            # seeds 1 2 3, results under runs/s2s-vs-torch
#   SEEDS="1" OUT=/tmp/cmp ./scripts/seq2seq-vs-pytorch.sh
#   INDEPENDENT=1 ./scripts/seq2seq-vs-pytorch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-1 2 3}
OUT=${OUT:-runs/s2s-vs-torch}
DATA=${DATA:-../shared/data/multi30k}
./scripts/setup.sh
PY=$(./scripts/install_torch_cpu.sh | tail -n 1)
"$PY" -c "import sacrebleu" 2>/dev/null || "$PY" -m pip install --quiet sacrebleu
source scripts/env.sh
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
CONFIG=configs/seq2seq_multi30k.toml
"$PY" -c "import safetensors" 2>/dev/null || "$PY" -m pip install --quiet safetensors
for s in $SEEDS; do
    echo "seed $s: gssp and PyTorch, one epoch each, side by side"
    gssp_start=() torch_start=()
    if [ "${INDEPENDENT:-0}" != 1 ]; then
        "$PY" scripts/pytorch_reference.py --model seq2seq --seed "$s" --data "$DATA" \
            --save-init "$OUT/init-seed$s.safetensors"
        target/release/gssp batches --config "$CONFIG" --set run.seed="$s" \
            --set data.dir="$DATA" --epochs 1 --out "$OUT/batches-seed$s.txt"
        gssp_start=(--set model.init_file="$OUT/init-seed$s.safetensors")
        torch_start=(--init "$OUT/init-seed$s.safetensors" --batches "$OUT/batches-seed$s.txt")
    fi
    target/release/gssp train --config "$CONFIG" --set run.seed="$s" \
        --set run.threads=1 --set data.dir="$DATA" "${gssp_start[@]}" --out "$OUT/gssp-seed$s" \
        > "$OUT/gssp-seed$s.log" 2>&1 &
    gssp_pid=$!
    "$PY" scripts/pytorch_reference.py --model seq2seq --epochs 1 --seed "$s" --batch 32 \
        --data "$DATA" "${torch_start[@]}" --json "$OUT/torch-seed$s.json" \
        --translations "$OUT/torch-seed$s.txt" > "$OUT/torch-seed$s.log" 2>&1
    wait "$gssp_pid"
done
"$PY" - "$OUT" $SEEDS <<'PY'
import json, statistics, sys
out, seeds = sys.argv[1], sys.argv[2:]
rows = []
for s in seeds:
    g = json.load(open(f"{out}/gssp-seed{s}/summary.json"))
    t = json.load(open(f"{out}/torch-seed{s}.json"))
    rows.append((s, g["final_test_perplexity"], t["test_ppl"], g["final_bleu"], t["bleu"],
                 g["images_per_s"], t["sentences_per_s"]))
print("| seed | gssp test ppl | PyTorch test ppl | gssp BLEU | PyTorch BLEU | gssp sent/s | PyTorch sent/s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print("| %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f |" % r)
med = [statistics.median(r[i] for r in rows) for i in range(1, 7)]
print("| median | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f |" % tuple(med))
print("gssp/PyTorch test perplexity (medians): %.3f" % (med[0] / med[1]))
PY
