#!/bin/bash
# Cold start-up of two checkouts, alternating: each run trains CONFIG with an empty compilation cache and
# prints the neighbour scan, the first step (with compilation), the log's average s/step and the overhead
# (wall time - steps x average s/step).
#   bash bench/cold_start_ab.sh CONFIG ROUNDS CHECKOUT_A CHECKOUT_B [key=value ...]
# e.g. bash bench/cold_start_ab.sh runs/s15_final/water_float32.json 3 /tmp/old /tmp/new training.embedding_table=64
set -euo pipefail
cfg=$(realpath "$1"); rounds=$2; A=$(realpath "$3"); B=$(realpath "$4"); shift 4
PY=${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}  # not realpath: that resolves the venv away
tmp=$(mktemp -d)
for r in $(seq "$rounds"); do
  for d in "$A" "$B"; do
    rm -rf "$tmp/cache" "$tmp/run"
    start=$(date +%s.%N)
    log=$(cd "$d" && PYTHONPATH="$d" "$PY" -m jaxmd_dp.train "$cfg" -o "$tmp/run" --force --compile-cache "$tmp/cache" "$@" 2>&1)
    end=$(date +%s.%N)
    scan=$(grep -oP "neighbour scan of \d+ frames in \K[\d.]+" <<<"$log" || echo "?")
    first=$(grep -oP "first training step \(including compilation\): \K[\d.]+" <<<"$log")
    avg=$(grep -oP "average training time: \K[\d.]+" <<<"$log")
    steps=$(grep -oP "batch +\K\d+(?=: total)" <<<"$log" | tail -1)
    python3 -c "w = $end - $start; print(f'$d round $r: scan $scan s, first step $first s, s/step $avg, wall {w:.2f} s, overhead {w - $steps * $avg:.2f} s')"
  done
done
rm -rf "$tmp"
