#!/usr/bin/env bash
# Water se_e2_a, one longer run of each: DeePMD-kit TF with its default schedule, ours with the same input,
# ours with a cosine schedule and an EMA of the weights. Each is tested on all 80 frames of water data_3 (the
# EMA run's `test` reads the EMA weights, as DeePMD-kit's does). Printed: E RMSE/atom (eV), F RMSE (eV/Å) and
# the run's wall time (s), one line each.
#
#   bash bench/water_schedules.sh [OUT_DIR]     (STEPS=20000, RUNS="tf ours ours_ema_cosine")
#
# The input is ../shared/bench/water_se_e2_a.json unchanged but for numb_steps = STEPS and decay_steps
# scaled with it (5000 × STEPS / 1,000,000: the production schedule's shape in fewer steps); the third run's
# input_ema_cosine.json has learning_rate {type: cosine, start_lr, stop_lr} and training.enable_ema true.
# The runs go one after the other: on a shared machine, nothing else should run meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-runs/water_schedules}")"
steps="${STEPS:-20000}"
mkdir -p "$out"
# shellcheck source=bench/water_runs.sh
source bench/water_runs.sh

"$py" - ../shared/bench/water_se_e2_a.json "$out/input.json" "$steps" "$data" <<'PY'
import json, sys
src, dst, steps, data = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
d = json.load(open(src))
d["training"]["numb_steps"] = steps
d["learning_rate"]["decay_steps"] = max(1, round(5000 * steps / 1_000_000))
d["training"]["training_data"]["systems"] = [f"{data}/data_{i}" for i in range(3)]
d["training"]["validation_data"]["systems"] = [f"{data}/data_3"]
json.dump(d, open(dst, "w"), indent=2)
lr = d["learning_rate"]
d["learning_rate"] = {"type": "cosine", "start_lr": lr["start_lr"], "stop_lr": lr["stop_lr"]}
d["training"]["enable_ema"] = True  # ema_decay: DeePMD-kit's default, 0.999
json.dump(d, open(dst.replace(".json", "_ema_cosine.json"), "w"), indent=2)
PY


for run in ${RUNS:-tf ours ours_ema_cosine}; do
  dir="$out/$run"
  rm -rf "$dir"
  input="$out/input.json" code="$run"
  [ "$run" = ours_ema_cosine ] && input="$out/input_ema_cosine.json" code=ours
  wall=$(train_and_test "$code" "$input" "$dir" "$out/$run.train.log" "$out/$run.test.log")
  echo "$run steps $steps E_rmse_per_atom F_rmse wall_s: $(rmse "$out/$run.test.log") $wall" | tee -a "$out/summary.txt"
done
