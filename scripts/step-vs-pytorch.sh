#!/usr/bin/env bash
# gssp's training step against the PyTorch reference's, interleaved: for each thread count and
# model, REPEATS rounds of (gssp bench step, then the reference's --bench-step), so that both
# see the same machine load; prints every run and then the medians and their ratio as a
# Markdown table. CIFAR models at batch 32 with crop-flip, LeNet-5 at batch 64 without
# augmentation (the reference reads Fashion-MNIST; gssp's step runs on synthetic data of the
# same shape). About 10 minutes on 2 cores. Never in CI (PyTorch is 4 GB).
#
#   ./scripts/step-vs-pytorch.sh
#   MODELS="resnet18" THREADS="1 2" REPEATS=3 ./scripts/step-vs-pytorch.sh
#   PY=/path/to/venv/bin/python ./scripts/step-vs-pytorch.sh   # a PyTorch already installed
#   GSSP_BASE=/tmp/gssp-main ./scripts/step-vs-pytorch.sh    # also an older build, interleaved
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-lenet5 resnet18 vgg19}
THREADS=${THREADS:-1 2}
REPEATS=${REPEATS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
GSSP=${GSSP:-target/release/gssp}
PY=${PY:-$(./scripts/install_torch_cpu.sh | tail -n 1)}
source scripts/env.sh
results=$(mktemp)
for t in $THREADS; do
    export OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t
    for m in $MODELS; do
        case $m in
            lenet5) batch=64 steps=$((SECONDS_PER_RUN * 60))
                    ref=(--augment none) ;;
            *) batch=32 steps=$((SECONDS_PER_RUN * t / 2 + 2))
               ref=(--data ../shared/data/cifar10) ;;
        esac
        for r in $(seq "$REPEATS"); do
            g=$("$GSSP" bench step --model "$m" --batch "$batch" --threads "$t" \
                --seconds "$SECONDS_PER_RUN" | awk '/^images_per_s:/ {print $2}')
            p=$("$PY" scripts/pytorch_reference.py --model "$m" --batch "$batch" --threads "$t" \
                --bench-step "$steps" "${ref[@]}" | awk '/^images_per_s:/ {print $2}')
            b=-
            if [ -n "${GSSP_BASE:-}" ]; then
                b=$("$GSSP_BASE" bench step --model "$m" --batch "$batch" --threads "$t" \
                    --seconds "$SECONDS_PER_RUN" | awk '/^images_per_s:/ {print $2}')
            fi
            echo "$m threads $t repeat $r: gssp $g images/s, pytorch $p, base $b" >&2
            echo "$m $batch $t $g $p $b" >>"$results"
        done
    done
done
echo "load: $(uptime)"
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m, b, t, g, p, base = line.split()
    rows.setdefault((m, int(b), int(t)), []).append((float(g), float(p), base))
print("| model | batch | threads | gssp images/s | PyTorch images/s | gssp / PyTorch | base images/s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (m, b, t), runs in rows.items():
    g = statistics.median(r[0] for r in runs)
    p = statistics.median(r[1] for r in runs)
    base = [float(r[2]) for r in runs if r[2] != "-"]
    base = f"{statistics.median(base):,.1f}" if base else "-"
    print(f"| {m} | {b} | {t} | {g:,.1f} | {p:,.1f} | {g / p:.2f}x | {base} |")
EOF
rm -f "$results"
