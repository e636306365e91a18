#!/usr/bin/env bash
# Data-parallel scaling of whole training runs, as a user starts them: DeePMD-kit's water input
# (../shared/bench/water_se_e2_a.json, batch 1 frame, validation of 3 frames every 100 steps), the difference
# of a SHORT- and a LONG-step run (start-up, compilation and the final checkpoint cancel), with
# `mpiexec -bind-to core -n 1` (one core) and `mpiexec -n 2` (both cores), taking turns, REPEATS times, after
# one untimed run of each (the compilation cache warm for all timed runs).
# Prints each pair's samples/s = ranks × 1 frame × (LONG − SHORT) / (t_LONG − t_SHORT), the medians and
# their ratios to the one-core run.
#
#   bash bench/parallel_whole_run.sh [OUT_DIR]
#     SHORT=50 LONG=250 REPEATS=3; ARGS: config overrides for every run;
#     EXTRA="NAME|RANKS|COMMAND PREFIX[|OVERRIDES];...": more launches, e.g. "bound|2|mpiexec -bind-to core -n 2"
#     or "k1|2|mpiexec -n 2|training.steps_per_dispatch=1"
#
# Needs mpi4py and mpi4jax (bash .ci/install_mpi4jax.sh .venv); nothing else should run meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-runs/parallel_whole_run}")"
short="${SHORT:-50}"; long="${LONG:-250}"
venv="$(realpath .venv)"
export PATH="$venv/bin:$PATH"
export JAXMD_DP_DATA_MIRROR="${JAXMD_DP_DATA_MIRROR:-$(realpath ../shared/data)}"
mkdir -p "$out"
# OUT_DIR/one_xla_thread CMD...: CMD with XLA on one thread, for a launch such as
# "2 ranks, 1 XLA thread each|2|mpiexec -n 2 OUT_DIR/one_xla_thread"
printf '#!/bin/sh\nexport XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"\nexec "$@"\n' \
  > "$out/one_xla_thread"
chmod +x "$out/one_xla_thread"
input="$(realpath ../shared/bench/water_se_e2_a.json)"

launches=("one core|1|mpiexec -bind-to core -n 1" "2 ranks|2|mpiexec -n 2")
IFS=';' read -r -a more <<< "${EXTRA:-}"
launches+=("${more[@]}")

run() {  # PREFIX STEPS [OVERRIDES]: the run's wall time in s
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # the prefix and overrides are words
  $1 python -m jaxmd_dp.train "$input" training.numb_steps="$2" ${ARGS:-} ${3:-} -o "$out/run" --force \
    > "$out/last.log" 2>&1 || { tail -5 "$out/last.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)"
}

for l in "${launches[@]}"; do IFS='|' read -r _ _ prefix extra <<< "$l"; run "$prefix" "$short" "$extra" > /dev/null; done
: > "$out/rates.txt"
for r in $(seq "${REPEATS:-3}"); do
  for l in "${launches[@]}"; do
    IFS='|' read -r name n prefix extra <<< "$l"
    ts=$(run "$prefix" "$short" "$extra"); tl=$(run "$prefix" "$long" "$extra")
    s=$(python3 -c "print(f'{$n * ($long - $short) / ($tl - $ts):.3f}')")
    echo "repeat $r $name: ${short} steps ${ts%.*} s, ${long} steps ${tl%.*} s, $s samples/s"
    echo "$name|$s" >> "$out/rates.txt"
  done
done
python3 - "$out/rates.txt" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    name, s = line.rstrip("\n").split("|")
    rates.setdefault(name, []).append(float(s))
base = statistics.median(next(iter(rates.values())))
for name, v in rates.items():
    m = statistics.median(v)
    print(f"{name}: median {m:.3f} samples/s over {len(v)} pairs, {m / base:.2f}x one core")
PY
