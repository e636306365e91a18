#!/bin/bash
# The training step alone without and with glibc's huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, what
# the command-line tools turn on themselves: jaxmd_dp/hugepages.py), processes alternating, with each
# process's page faults and kernel time.
#   bash bench/hugepages_ab.sh CONFIG PRECISION [ROUNDS] [bench/step_time.py options...]
#   bash bench/hugepages_ab.sh runs/s27/water_float32.json float32 2 --table 0 64 --steps 150 --batches 4
set -euo pipefail
cfg=$1; prec=$2; rounds=${3:-2}; shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/.."
for rep in $(seq "$rounds"); do
  for tunables in "" "glibc.malloc.hugetlb=1"; do
    echo "== GLIBC_TUNABLES=${tunables:-unset} round $rep"
    env -u GLIBC_TUNABLES ${tunables:+GLIBC_TUNABLES=$tunables} /usr/bin/time -f "time: wall %e s, user %U s, sys %S s, minor faults %R" \
      .venv/bin/python bench/step_time.py "$cfg" --precision "$prec" "$@" 2>&1 | grep -E "step median|^time:" | sed -E 's/; last step.*//'
  done
done
