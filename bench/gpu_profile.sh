#!/usr/bin/env bash
# Where a float64 training step's time goes on a GPU: a `train --profile` trace of each ASC22 input (ours,
# defaults, 40 steps), summarised by bench/profile_summary.py per process (the device's streams apart from the
# host's threads): op time per kind, how long 0, 1, 2, ... streams ran at once, the costliest ops. Each input
# is trained once first into a compilation cache that the traced run loads, so that batch shapes first met
# in the traced steps (Cu's and Al-Cu-Mg's merged sizes) are not compiled there. Writes OUTDIR/INPUT.txt
# (summary) and OUTDIR/INPUT.tgz (the trace, for TensorBoard or Perfetto). About 2.5 minutes on an H200.
#   bash bench/gpu_profile.sh OUTDIR             (INPUTS="water copper almgcu", LIMIT=90 s a run)
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
runs=$(mktemp -d)
for name in ${INPUTS:-water copper almgcu}; do
  "$PY" -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; import train_speed as t
t.write_input('$name', ${STEPS:-40}, 10, 'float64', Path('$runs'))"
  train=("$PY" -m jaxmd_dp.train "$runs/${name}_float64.json" -o "$runs/$name" --force --compile-cache "$runs/cache")
  timeout "${LIMIT:-90}" "${train[@]}" > "$runs/$name.warm.log" 2>&1
  timeout "${LIMIT:-90}" "${train[@]}" --profile "$runs/prof_$name" 2>&1 | tee "$runs/$name.log" \
    | grep -E 'profil|average'
  range=$(grep -oE 'profiled steps [0-9]+-[0-9]+' "$runs/$name.log" | grep -oE '[0-9]+-[0-9]+')
  [ -n "$range" ] || { echo "$name: no trace"; continue; }
  steps=$((${range#*-} - ${range%-*} + 1))
  "$PY" bench/profile_summary.py "$runs/prof_$name" --steps "$steps" --top 25 2>&1 | tee "$out/$name.txt"
  tar -czf "$out/$name.tgz" -C "$runs" "prof_$name"
done
rm -rf "$runs"
