# Sourced by the water accuracy scripts (se_atten_accuracy.sh, water_schedules.sh): one training run of
# DeePMD-kit TF or of ours, then a test of its model on all 80 frames of water data_3. Sourced from the
# checkout's root; sets $py (our Python, $PYTHON or .venv's), $dk (../shared/bench/deepmd_kit.sh), $data (the
# water data folder) and the data mirror for our runs.

py="${PYTHON:-.venv/bin/python}"
dk="$(realpath ../shared/bench/deepmd_kit.sh)"
data="$(realpath ../shared/data/water)"
export JAXMD_DP_DATA_MIRROR="${JAXMD_DP_DATA_MIRROR:-$(realpath ../shared/data)}"

rmse() {  # LOG: "E_per_atom F" from a test log (ours or DeePMD-kit's)
  local e f
  e=$(grep -E "Energy RMSE/Natoms" "$1" | tail -1 | awk '{print $(NF-1)}')
  f=$(grep -E "Force +RMSE" "$1" | tail -1 | awk '{print $(NF-1)}')
  echo "$e $f"
}

train_and_test() {  # tf|ours INPUT RUN_DIR TRAIN_LOG TEST_LOG: trains, tests; prints the training's wall time (s)
  local code="$1" input="$2" run="$3" train_log="$4" test_log="$5" t0 t1
  t0=$(date +%s.%N)
  case "$code" in
    tf)
      bash "$dk" train tf "$input" "$run" > "$train_log"
      t1=$(date +%s.%N)
      ( cd "$run" && bash "$dk" dp tf freeze -o frozen_model.pb > freeze.log 2>&1 \
        && bash "$dk" dp tf test -m frozen_model.pb -s "$data/data_3" -n 0 > "$test_log" 2>&1 ) ;;
    ours)
      "$py" -m jaxmd_dp.train "$input" -o "$run" > "$train_log" 2>&1
      t1=$(date +%s.%N)
      "$py" -m jaxmd_dp.test -m "$run" -s "$data/data_3" > "$test_log" 2>&1 ;;
    *) echo "unknown code $code (tf|ours)" >&2; return 2 ;;
  esac
  python3 -c "print(f'{$t1 - $t0:.0f}')"
}
