#!/usr/bin/env bash
# What bounds our training on a GPU: the three ASC22 inputs in float64, ours only, with its defaults and
# with one variation each: XLA's GEMM autotuning on (level 4), cuBLAS for every matrix product instead of
# Triton's fusions, command buffers (CUDA graphs) extended to the loop's while and conditional ops, and on
# water steps per dispatch (1, 50; Cu's and Al-Cu-Mg's merged batches run one step per dispatch whatever it
# is). Two tables (bench/gpu_side_by_side.py's): ms/step (median over the lcurve windows after the first),
# ÷ the defaults, first step (compilation included), last lcurve row. About 5 minutes on an H200.
#   bash bench/gpu_loop_options.sh OUTDIR          (STEPS=300, DISP=50, LIMIT=60 s a run)
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh
args=(--steps "${STEPS:-300}" --disp "${DISP:-50}" --limit "${LIMIT:-60}")
"$PY" bench/gpu_side_by_side.py "$out/water" --inputs water "${args[@]}" \
  --codes ours-float64 ours-float64-k1 ours-float64-k50 ours-float64-autotune ours-float64-cublas \
  ours-float64-cb-while 2>&1 | tee "$out/water.txt"
"$PY" bench/gpu_side_by_side.py "$out/others" --inputs copper almgcu "${args[@]}" \
  --codes ours-float64 ours-float64-autotune ours-float64-cublas 2>&1 | tee "$out/others.txt"
