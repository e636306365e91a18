#!/usr/bin/env bash
# DeePMD-kit's PyTorch backend on our se_atten_v2 model: train DeePMD-kit's DPA-1 water example a few steps,
# freeze it to DeePMD-kit's .dp, `dp convert-backend model.dp model.pth`, `dp --pt test` on frames of data_3,
# and our `test` of the same .dp; prints the largest difference of each prediction (energy, forces, virial,
# atomic energies) relative to its largest value.
#   bash bench/deepmd_pth_check.sh [OUT_DIR] [NFRAMES]        (DeePMD-kit's PyTorch venv from deepmd_kit.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-runs/pth_check}")"; n="${2:-10}"
py="${PYTHON:-.venv/bin/python}"
dk="$(realpath ../shared/bench/deepmd_kit.sh)"
data="$(realpath ../shared/data/water/data_3)"
export JAXMD_DP_DATA_MIRROR="${JAXMD_DP_DATA_MIRROR:-$(realpath ../shared/data)}"
rm -rf "$out"; mkdir -p "$out"
"$py" -m jaxmd_dp.train ../shared/bench/water_se_atten_v2.json training.numb_steps=20 training.disp_freq=10 \
  training.save_freq=20 -o "$out/run" > "$out/train.log" 2>&1
"$py" -m jaxmd_dp.freeze -m "$out/run" -o "$out/model.dp" > "$out/freeze.log" 2>&1
"$py" -m jaxmd_dp.test -m "$out/model.dp" -s "$data" -n "$n" -d "$out/ours" > "$out/ours_test.log" 2>&1
( cd "$out"
  bash "$dk" dp pt convert-backend model.dp model.pth > convert.log 2>&1
  bash "$dk" dp pt test -m model.pth -s "$data" -n "$n" -d pt > pt_test.log 2>&1 )
"$py" - "$out" <<'PY'
import sys
import numpy as np
out = sys.argv[1]
for k in ("e", "f", "v", "e_peratom"):
    a, b = np.loadtxt(f"{out}/pt.{k}.out", ndmin=2), np.loadtxt(f"{out}/ours.{k}.out", ndmin=2)
    h = a.shape[1] // 2  # columns: labels, then predictions
    print(f"{k}: {a.shape[0]} rows, max |pt - ours| / max |ours| = {np.abs(a[:, h:] - b[:, h:]).max() / np.abs(b[:, h:]).max():.1e}")
PY
