#!/usr/bin/env bash
# Issue 3 accuracy check: train configs/water.yaml (2,000 steps) with seeds 10/20/30, then test each model on
# all frames of water data_3 with our `test`. Compare with DeePMD-kit (bench/deepmd_water_baseline.sh).
#   [SEEDS="10 20 30"] bash bench/water_accuracy.sh [OUT_DIR] [extra overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/water_accuracy}"; shift || true
py="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
export JAXMD_DP_DATA_MIRROR="${JAXMD_DP_DATA_MIRROR:-$(realpath ../shared/data)}"
for seed in ${SEEDS:-10 20 30}; do
  run="$out/seed$seed"
  "$py" -m jaxmd_dp.train configs/water.yaml training.seed=$seed "$@" -o "$run" --force > "$run.train.log" 2>&1
  "$py" -m jaxmd_dp.test -m "$run" -s data/water/data_3 > "$run.test.log" 2>&1
  echo "seed $seed $(grep -E 'average training time' "$run.train.log" | head -1)"
  grep -E "Energy RMSE/Natoms|Force  RMSE" "$run.test.log" | sed "s/^/seed $seed /"
done
