#!/usr/bin/env bash
# Issue 3 accuracy check: train configs/water.yaml (2,000 steps) with seeds 10/20/30, then test each model on
# all frames of water data_3 with our `test`. Compare with DeePMD-kit (bench/deepmd_water_baseline.sh).
# A seed S sets the initial weights and the data order: model.descriptor.seed = model.fitting_net.seed =
# training.seed = S (with the config's fixed model seed every run would start from the same weights, and
# the mean over seeds would measure one initial draw). INIT_SEED=config keeps the config's model seeds.
#   [SEEDS="10 20 30"] bash bench/water_accuracy.sh [OUT_DIR] [extra overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/water_accuracy}"; shift || true
py="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
export JAXMD_DP_DATA_MIRROR="${JAXMD_DP_DATA_MIRROR:-$(realpath ../shared/data)}"
for seed in ${SEEDS:-10 20 30}; do
  run="$out/seed$seed"
  init=(model.descriptor.seed=$seed model.fitting_net.seed=$seed)
  [ "${INIT_SEED:-seed}" = config ] && init=()
  "$py" -m jaxmd_dp.train configs/water.yaml training.seed=$seed "${init[@]}" "$@" -o "$run" --force > "$run.train.log" 2>&1
  "$py" -m jaxmd_dp.test -m "$run" -s data/water/data_3 > "$run.test.log" 2>&1
  echo "seed $seed $(grep -E 'average training time' "$run.train.log" | head -1)"
  grep -E "Energy RMSE/Natoms|Force  RMSE" "$run.test.log" | sed "s/^/seed $seed /"
done
