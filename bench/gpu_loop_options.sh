#!/usr/bin/env bash
# What bounds our training loop on a GPU: the three ASC22 inputs in float64, ours only, with its defaults
# and with one variation each: XLA's command buffers (CUDA graphs) off, or extended to the loop's while and
# conditional ops, and on water steps per dispatch (1, 50; Cu's and Al-Cu-Mg's merged batches run one step
# per dispatch whatever it is). One table of ms/step (median over the lcurve windows after the first),
# first step (compilation included) and the last lcurve row. About 4 minutes on an H200.
#   bash bench/gpu_loop_options.sh OUTDIR
#   INPUTS="water" VARIANTS="default k50" STEPS=300 DISP=50 LIMIT=60 bash bench/gpu_loop_options.sh OUTDIR
# Reads the inputs and data from ../shared (or the checkout's shared/, linked as ../shared when that is
# missing: bench/gpu_wheels.sh puts them there).
set -uo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:?usage: bash bench/gpu_loop_options.sh OUTDIR}")"
mkdir -p "$out/in"
PY="${PYTHON:-python3}"
[ -e ../shared ] || ln -sfn "$PWD/shared" ../shared
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
steps="${STEPS:-300}"; disp="${DISP:-50}"
cb_all="FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
declare -A flags=([default]="" [k1]="" [k50]="" [cb-off]="--xla_gpu_enable_command_buffer=" \
  [cb-while]="--xla_gpu_enable_command_buffer=$cb_all")
declare -A keys=([default]="" [k1]="training.steps_per_dispatch=1" [k50]="training.steps_per_dispatch=50" \
  [cb-off]="" [cb-while]="")
: > "$out/rows.txt"
for name in ${INPUTS:-water copper almgcu}; do
  inp=$("$PY" -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; import train_speed as t
print(t.write_input('$name', $steps, $disp, 'float64', Path('$out/in')))") || exit 1
  variants="default cb-off cb-while"
  [ "$name" = water ] && variants="default k1 k50 cb-off cb-while"
  for v in ${VARIANTS:-$variants}; do
    log="$out/$name.$v.log"
    xf="$(echo ${XLA_FLAGS:-} ${flags[$v]})"  # XLA_FLAGS must not be blank
    if [ -n "$xf" ]; then set_flags=(env "XLA_FLAGS=$xf"); else set_flags=(env -u XLA_FLAGS); fi
    # shellcheck disable=SC2086  # the config key is one word or none
    "${set_flags[@]}" timeout "${LIMIT:-60}" "$PY" -m jaxmd_dp.train "$inp" \
      -o "$out/$name.$v" --force ${keys[$v]} > "$log" 2>&1
    echo "$name|$v|$?|$out/$name.$v" >> "$out/rows.txt"
  done
done
"$PY" - "$out/rows.txt" "$steps" "$disp" <<'PY'
import re, statistics, sys
sys.path.insert(0, "bench")
import train_speed as ts
rows, steps, disp = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"ours, float64, {steps} steps, lcurve every {disp}; ms/step: median over the windows after the first\n")
print("| input | variant | ms/step | first step s | last lcurve row |")
print("|---|---|---|---|---|")
for line in open(rows):
    name, v, rc, run = line.rstrip("\n").split("|")
    text = open(f"{run}.log").read()
    if rc != "0":
        tail = text.strip().splitlines()[-1][-100:] if text.strip() else ""
        print(f"| {name} | {v} | failed ({'time limit' if rc == '124' else tail}) | | |")
        continue
    first = re.search(r"first training step \(including compilation\): ([\d.]+) s", text)
    last = [ln for ln in open(f"{run}/lcurve.out").read().splitlines() if ln.strip() and not ln.startswith("#")]
    print(f"| {name} | {v} | {1e3 * statistics.median(ts.windows(text)):.2f} | {first.group(1) if first else ''} "
          f"| {' '.join(last[-1].split()) if last else ''} |")
PY
