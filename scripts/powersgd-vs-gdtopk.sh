#!/usr/bin/env bash
# PowerSGD against GDTopK between gssp's groups, at about equal bytes per exchange, in two
# scenarios, once per seed, the two methods back to back:
#   lenet5:   configs/paper_lenet5_mnist.toml (16 workers in tiers 1x-4x, 4 groups, 75 s),
#             GDTopK at 1.5% against PowerSGD at rank LENET_RANKS (default "1 2": 0.68x and
#             1.22x GDTopK's bytes per exchange; no rank matches it closer);
#   resnet18: configs/resnet18_cifar10_gssp.toml (8 workers in tiers 1x-4x, width 0.5,
#             600 s), GDTopK at 1.5% against PowerSGD at rank 4 (0.92x its bytes).
#             Time to RESNET_TARGET (default 0.35) test accuracy, from eval.csv: on a 2-core
#             machine at 105 images/s the config's own 45% is not reliably reached.
# Both use the speed policy (the fastest group sends least: fewer values, or a lower rank).
# Prints one row per run: time to the config's target, accuracy at the budget, bytes between
# groups, mean thread-CPU milliseconds per exchange (per group server, then their mean), and
# images/s; then the medians per method. About 9 minutes per seed for lenet5 (three runs)
# and 21 for resnet18; run on an otherwise idle machine (the tiers are wall-clock pacing).
#
#   ./scripts/powersgd-vs-gdtopk.sh                     # both scenarios, seeds 1 2 3
#   SCENARIOS=lenet5 SEEDS="1" ./scripts/powersgd-vs-gdtopk.sh
#   SUMMARY_ONLY=1 ./scripts/powersgd-vs-gdtopk.sh      # the table of runs already made
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-1 2 3}
SCENARIOS=${SCENARIOS:-lenet5 resnet18}
LENET_RANKS=${LENET_RANKS:-1 2}
RESNET_TARGET=${RESNET_TARGET:-0.35}
OUT=${OUT:-runs/powersgd}
BIN=${BIN:-target/release/gssp}
if [ "$BIN" = target/release/gssp ]; then ./scripts/setup.sh; fi
source scripts/env.sh
export OPENBLAS_NUM_THREADS=1

run() { # scenario seed name ranks config [--set ...]
    local scenario=$1 seed=$2 name=$3 ranks=$4 cfg=$5
    shift 5
    local out="$OUT/$scenario/seed$seed/$name"
    rm -rf "$out"
    mpirun -n "$ranks" --bind-to none "$BIN" train --config "$cfg" --set run.seed="$seed" \
        "$@" --out "$out" > "$out.log" 2>&1 || { echo "FAILED: $out (see $out.log)"; exit 1; }
    grep -m1 "powersgd rank" "$out.log" || true
}

# SUMMARY_ONLY=1 prints the table of the runs already under $OUT without running any.
[ -n "${SUMMARY_ONLY:-}" ] && SEEDS=none
for seed in $SEEDS; do
    [ "$seed" = none ] && break
    for scenario in $SCENARIOS; do
        case $scenario in
            lenet5)
                cfg=configs/paper_lenet5_mnist.toml
                mkdir -p "$OUT/$scenario/seed$seed"
                run lenet5 "$seed" gdtopk 20 "$cfg"
                for r in $LENET_RANKS; do
                    run lenet5 "$seed" "powersgd-r$r" 20 "$cfg" \
                        --set compression.kind=powersgd --set compression.rank="$r"
                done
                ;;
            resnet18)
                cfg=configs/resnet18_cifar10_gssp.toml
                mkdir -p "$OUT/$scenario/seed$seed"
                run resnet18 "$seed" gdtopk 12 "$cfg"
                run resnet18 "$seed" powersgd-r4 12 "$cfg" \
                    --set compression.kind=powersgd --set compression.rank=4
                ;;
            *) echo "unknown scenario $scenario (lenet5, resnet18)"; exit 2 ;;
        esac
    done
done

python3 - "$OUT" "$RESNET_TARGET" <<'EOF'
import csv, glob, json, os, re, statistics, sys
out, resnet_target = sys.argv[1], float(sys.argv[2])

def time_to(run_dir, target):
    """Seconds of the first eval.csv row at or above `target` (None: never)."""
    with open(os.path.join(run_dir, "eval.csv")) as f:
        for row in csv.DictReader(f):
            if float(row["test_accuracy"]) >= target:
                return float(row["time_s"])
    return None

rows = {}
for path in sorted(glob.glob(f"{out}/*/seed*/*/summary.json")):
    parts = path.split(os.sep)
    scenario, seed, name = parts[-4], parts[-3], parts[-2]
    s = json.load(open(path))
    cpu = s.get("mean_exchange_cpu_ms") or []
    target = resnet_target if scenario == "resnet18" else s["target_accuracy"]
    row = (time_to(os.path.dirname(path), target), s.get("final_test_accuracy"),
           s.get("bytes_inter_group"), statistics.mean(cpu) if cpu else None, cpu,
           s.get("images_per_s"))
    # Wall milliseconds per exchange of taking the change (top-k or compression) and of
    # draining what peers sent, from each group server's log line, averaged over servers.
    phases = re.findall(r"group \d+: (\d+) exchanges, phases \(s\): top-k or compression "
                        r"([\d.]+) send ([\d.]+) drain ([\d.]+)", open(path[:-len("/summary.json")] + ".log").read())
    take = statistics.mean(1e3 * float(t) / max(int(n), 1) for n, t, _, _ in phases)
    drain = statistics.mean(1e3 * float(d) / max(int(n), 1) for n, _, _, d in phases)
    row = row + (take, drain)
    rows.setdefault((scenario, name), []).append((seed, row))
fmt = lambda x, f: "never" if x is None else f.format(x) + " s"
for (scenario, name), runs in sorted(rows.items()):
    print(f"{scenario} {name} (target {resnet_target if scenario == 'resnet18' else 0.98})")
    for seed, (t, acc, b, cpu, per, ips, take, drain) in runs:
        print(f"  {seed}: time to target {fmt(t, '{:.1f}')}, accuracy {acc:.4f}, "
              f"bytes between groups {b:,}, CPU ms per exchange {cpu:.3f} "
              f"({', '.join(f'{x:.3f}' for x in per)}), of which wall ms taking {take:.3f}, "
              f"draining {drain:.3f}; images/s {ips:.0f}")
    times = [r[0] for _, r in runs]
    reached = sorted(t if t is not None else float("inf") for t in times)
    med = statistics.median(reached)
    print(f"  median: time to target {fmt(med if med != float('inf') else None, '{:.1f}')}, "
          f"accuracy {statistics.median(r[1] for _, r in runs):.4f}, "
          f"bytes {statistics.median(r[2] for _, r in runs):,.0f}, "
          f"CPU ms per exchange {statistics.median(r[3] for _, r in runs):.3f} (taking "
          f"{statistics.median(r[6] for _, r in runs):.3f}, draining "
          f"{statistics.median(r[7] for _, r in runs):.3f}), "
          f"images/s {statistics.median(r[5] for _, r in runs):.0f}")
EOF
