#!/usr/bin/env bash
# Cu accuracy side by side: DeePMD-kit's input for the ASC22 copper set (../shared/bench/copper_asc22.json,
# 142 training systems, batch "auto"), trained for STEPS steps by DeePMD-kit 3.2.0 (TensorFlow backend) and
# by jaxmd_dp (exact embedding nets; TABLE=64 adds a run with training.embedding_table=64), for each seed of SEEDS
# (training.seed = descriptor.seed = fitting_net.seed = SEED). Then each model is tested, with its own
# code's `test`, on all frames of
#   held-out: the 26 cu_asc22 systems of 12–32 atoms that the input does not train on (vacuum left out:
#             one atom, no forces), and
#   training: the 142 training systems.
# Prints one line per code and set: energy RMSE per atom (eV) and force RMSE (eV/Å), the systems' weighted
# averages as `dp test` prints them.
# SETS="held_out" skips the (slow: minutes per code) test on the training systems.
#   [SEEDS="1"] [STEPS=2000] [TABLE=64] [PRECISION=float64] [SETS="held_out training"] bash bench/cu_accuracy.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "${1:-runs/cu_accuracy}" && cd "${1:-runs/cu_accuracy}" && pwd)"
py="${PYTHON:-.venv/bin/python}"; py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")"  # absolute, venv link kept
DK="$(realpath ../shared/bench/deepmd_kit.sh)"
SRC="$(realpath ../shared/bench/copper_asc22.json)"
STEPS="${STEPS:-2000}"
bash "$DK" install tf >/dev/null

# The test sets as directories of links (both codes' `test` search a directory for systems).
"$py" - "$SRC" "$out" <<'PY'
import json, os, sys
from jaxmd_dp.data.sampler import find_systems
src, out = sys.argv[1], sys.argv[2]
base = os.path.dirname(src)
train = sorted(os.path.realpath(os.path.join(base, p)) for p in json.load(open(src))["training"]["training_data"]["systems"])
every = sorted(os.path.realpath(s) for s in find_systems(os.path.join(base, "../data/cu_asc22")))
held = [s for s in every if s not in train and os.path.basename(s) != "vacuum"]
for name, systems in (("held_out", held), ("training", train)):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for i, s in enumerate(systems):
        link = os.path.join(d, f"sys{i:03d}")
        if not os.path.lexists(link):
            os.symlink(s, link)
    print(f"{name}: {len(systems)} systems")
PY

rmse() {  # the weighted averages of a dp-test-style log: E RMSE/atom, F RMSE
  local e f
  e=$(grep -E "Energy RMSE/Natoms" "$1" | tail -1 | awk '{print $(NF-1)}')
  f=$(grep -E "Force +RMSE" "$1" | grep -v "Natoms" | tail -1 | awk '{print $(NF-1)}')
  echo "E_rmse_per_atom $e F_rmse $f"
}

for seed in ${SEEDS:-1}; do
  dir="$out/seed$seed"; mkdir -p "$dir"
  "$py" - "$SRC" "$dir/input.json" "$seed" "${PRECISION:-float64}" <<'PY'
import json, os, sys
src, dst, seed, prec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
d = json.load(open(src))
base = os.path.dirname(src)
d["training"]["training_data"]["systems"] = [os.path.realpath(os.path.join(base, p)) for p in d["training"]["training_data"]["systems"]]
d["training"]["seed"] = d["model"]["descriptor"]["seed"] = d["model"]["fitting_net"]["seed"] = seed
d["model"]["descriptor"]["precision"] = d["model"]["fitting_net"]["precision"] = prec
json.dump(d, open(dst, "w"), indent=1)
PY
  # DeePMD-kit TF
  rm -rf "$dir/tf"
  # (its timing summary needs a few lcurve lines: with STEPS < 2 × disp_freq it exits 1 after training)
  bash "$DK" train tf "$dir/input.json" "$dir/tf" "$STEPS" > "$dir/tf.train.log" 2>&1 || [ -e "$dir/tf/checkpoint" ]
  ( cd "$dir/tf" && bash "$DK" dp tf freeze -o frozen_model.pb > freeze.log 2>&1
    for set in ${SETS:-held_out training}; do bash "$DK" dp tf test -m frozen_model.pb -s "$out/$set" -n 0 > "test_$set.log" 2>&1; done )
  echo "seed $seed deepmd-tf $(grep s_per_step_median "$dir/tf.train.log" | tail -1)"
  for set in ${SETS:-held_out training}; do echo "seed $seed deepmd-tf $set $(rmse "$dir/tf/test_$set.log")"; done
  # jaxmd_dp, exact nets (and the table)
  for variant in exact ${TABLE:+table$TABLE}; do
    extra=(); [ "$variant" != exact ] && extra=(training.embedding_table="$TABLE")
    "$py" -m jaxmd_dp.train "$dir/input.json" training.numb_steps="$STEPS" "${extra[@]}" -o "$dir/$variant" --force \
      > "$dir/$variant.train.log" 2>&1
    for set in ${SETS:-held_out training}; do "$py" -m jaxmd_dp.test -m "$dir/$variant" -s "$out/$set" -n 0 > "$dir/$variant.test_$set.log" 2>&1; done
    echo "seed $seed jaxmd_dp-$variant $(grep 'average training time' "$dir/$variant.train.log" | tail -1)"
    for set in ${SETS:-held_out training}; do echo "seed $seed jaxmd_dp-$variant $set $(rmse "$dir/$variant.test_$set.log")"; done
  done
done
