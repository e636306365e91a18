#!/usr/bin/env bash
# Ours against DeePMD-kit 3.2.0's PyTorch and JAX backends on one GPU, the three ASC22 inputs, one table
# (bench/gpu_side_by_side.py). Sized for a short GPU slot: about 8 minutes on an H200 (STEPS=300 a run,
# each cut at LIMIT=150 s; DeePMD-kit's JAX backend takes about a minute to start).
#   here, once (a machine with a package index):  bash bench/gpu_wheels.sh
#   on the GPU machine, from the checkout:          bash bench/gpu_side_by_side.sh OUTDIR
# The GPU machine needs jax with CUDA, flax, optax and orbax, torch (DeePMD-kit's PyTorch backend) and the
# wheels in .whl/ (DeePMD-kit and what it imports beyond those), installed under /tmp; the inputs and
# their data come from ../shared, or from the checkout's shared/ (linked as ../shared when that is missing).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh
if ! "$PY" -c "import deepmd.pt.cxx_op" 2>/dev/null; then  # its PyTorch backend loads libmpi on import
  # DeePMD-kit's PyTorch backend finds libmpi through the mpich package's file list, which points outside
  # site-packages: mpich goes in with --prefix, the rest with --target.
  pipi=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
  "${pipi[@]}" --prefix /tmp/mpich .whl/mpich-*.whl && "${pipi[@]}" --target /tmp/site $(ls .whl/*.whl | grep -v /mpich-) \
    || { echo "no DeePMD-kit: run bench/gpu_wheels.sh where pip can reach an index"; exit 1; }
  mpich_site="$(dirname "$(find /tmp/mpich -maxdepth 5 -name 'mpich-*.dist-info' | head -1)")"
  export PYTHONPATH=/tmp/site:$mpich_site${PYTHONPATH:+:$PYTHONPATH}
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  "$PY" -c "import jax, torch, deepmd; print('jax', jax.__version__, 'torch', torch.__version__, 'deepmd-kit', deepmd.__version__, jax.devices())"
  git log -1 --format='commit %h %s' 2>/dev/null
} 2>&1 | tee "$out/env.txt"
"$PY" bench/gpu_side_by_side.py "$out" --steps "${STEPS:-300}" --disp "${DISP:-50}" --limit "${LIMIT:-150}" \
  ${CODES:+--codes $CODES} ${INPUTS:+--inputs $INPUTS} 2>&1 | tee "$out/table.txt"
