#!/usr/bin/env bash
# The standing figures of docs/results.md (docs/benchmarks.md describes each command) but the
# three-seed seq2seq ones (scripts/seq2seq-vs-pytorch.sh,
# scripts/seq2seq-four-tier.sh) and PowerSGD against GDTopK (scripts/powersgd-vs-gdtopk.sh),
# one after the other (about 365 minutes on 2 cores, 65 of them the transient, speed-change
# and recovering-straggler scenarios and 175 the three-seed scale study; the configs bench includes both
# seq2seq configs).
# Run on an otherwise idle machine: the figures are wall-clock times.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
bin=target/release/gssp
mkdir -p runs
"$bin" bench step --model lenet5 --batch 64 --threads 1 | tee runs/bench-step.txt
for m in resnet18 vgg19; do
    "$bin" bench step --model $m --batch 32 --threads 1 --seconds 10 | tee runs/bench-step-$m.txt
done
if [ -d ../shared/data/multi30k ]; then
    "$bin" bench step --model seq2seq --batch 32 --threads 1 --seconds 10 | tee runs/bench-step-seq2seq.txt
fi
"$bin" bench topk --n 11200000 --ratio 0.01 | tee runs/bench-topk.txt
"$bin" bench paper --seeds 42,2,7 --out runs/bench-paper | tee runs/bench-paper.txt
for scenario in transient speed_change; do
    "$bin" bench paper --config configs/paper_lenet5_mnist_$scenario.toml --budget-s 60 --seeds 1,2,3 \
        --modes allreduce,bsp,asp,ssp,asp-dc,localsgd,gssp-gdtopk --out runs/bench-$scenario \
        | tee runs/bench-$scenario.txt
done
# A straggler that recovers: the transient scenario plus worker 3 5x slower from 3 s to 13 s,
# regroup meetings every 2.5 s (docs/history.md, "a straggler that recovers").
"$bin" bench paper --config configs/paper_lenet5_mnist_transient.toml \
    --set 'heterogeneity.changes=[{at_s=3.0,worker=3,factor=5.0},{at_s=13.0,worker=3,factor=1.0}]' \
    --set sync.gssp.regroup_every_s=2.5 --budget-s 60 --seeds 1,2,3 --modes gssp-gdtopk,asp-dc \
    --out runs/bench-recovery | tee runs/bench-recovery.txt
# The scale study (8-64 workers, every mode, 3 seeds; about 55 minutes a seed) and the
# simulator against it (latency and burst spacing are this machine's fitted figures;
# docs/scaling.md).
"$bin" bench scale --budget-s 60 --seeds 42,43,44 --out runs/bench-scale | tee runs/bench-scale.txt
"$bin" bench plan $(dirname runs/bench-scale/*-workers/seed-*/*/summary.json) --latency-us 100 --burst-us 1100 \
    | tee runs/bench-plan.txt
"$bin" bench configs --out runs/bench-configs | tee runs/bench-configs.txt
"$bin" bench modes --config configs/modes_lenet5_mnist.toml --out runs/bench-modes-uniform | tee runs/bench-modes-uniform.txt
"$bin" bench modes --config configs/modes_lenet5_mnist.toml --out runs/bench-modes-tiers \
    --set 'heterogeneity.tiers=[{factor=1.0,workers=2},{factor=2.0,workers=2},{factor=3.0,workers=2},{factor=4.0,workers=2}]' \
    --set heterogeneity.unit_s=0.03 --set run.epochs=0 --set run.time_budget_s=60 | tee runs/bench-modes-tiers.txt
for e in 2 10; do
    "$bin" train --config configs/lenet5_mnist.toml --set run.epochs=$e --out runs/lenet5_mnist_${e}ep | tee runs/bench-single-${e}ep.txt
done
