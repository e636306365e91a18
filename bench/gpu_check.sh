#!/bin/bash
# On a GPU machine, in one go (about 9 minutes on an H200):
#  1. DeePMD-kit equivalence with the Pallas kernels on the GPU (the fixture tests);
#  2. training speed of the three ASC22 inputs (bench/train_speed.py, ours only: DeePMD-kit's bench
#     script installs a CPU build), exact nets and table 64, both precisions;
#  3. water again with JAXMD_DP_KERNELS=jnp (the Pallas kernels against the jnp path in training);
#  4. the bare training step on Cu and Al-Cu-Mg (bench/step_time.py: no loop, batches cycled), to set
#     against 2.'s s/step: what the loop around the step costs;
#  5. the kernels' own timings (bench/gpu_kernels.py);
#  6. a profile of steps 4-8 of the Cu float32 loop (train --profile; OUTDIR/prof_copper.tgz, for
#     TensorBoard or Perfetto): where the host leaves the GPU idle.
# Six files in OUTDIR (a device tool may bring back only a few).
#   bash bench/gpu_check.sh OUTDIR
# Needs ../shared (data, fixtures, bench inputs) beside the checkout, as every benchmark here does. Where
# only the checkout travels to the GPU machine (session 23), copy ../shared/{data,fixtures,bench} into a
# git-ignored folder of it (55 MB without nopbc data) and run `ln -sfn "$PWD/FOLDER" ../shared` there first.
# Each part has its own time limit (seconds, in the variables below), so a slow or failing part leaves
# the others running; STEPS and the limits are variables for a smoke run on a CPU.
out=${1:?usage: bash bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
PY=${PYTHON:-python3}
STEPS=${STEPS:-500}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
runs=$(mktemp -d)
mkdir -p "$runs/in"  # the inputs of parts 4 and 6, as bench/train_speed.py writes them
$PY -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; import train_speed as t
for name, prec in (('copper', 'float32'), ('copper', 'float64'), ('almgcu', 'float64')):
    t.write_input(name, $STEPS, 50, prec, Path('$runs/in'))"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  $PY -c "import jax, flax, optax, orbax.checkpoint, numpy; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'numpy', numpy.__version__); print(jax.devices())"
  nproc
  git log -1 --format='commit %h %s' 2>/dev/null
} 2>&1 | tee "$out/env.txt"
echo "== 1. fixtures (DeePMD-kit's predictions, kernels: auto)"
timeout "${T_FIXTURES:-80}" $PY -m pytest -q -p no:cacheprovider tests/model/test_fixtures.py 2>&1 | tail -15 | tee "$out/fixtures.txt"
echo "== 2. training speed"
for input in water copper almgcu; do  # each input its own limit: a slow compile on one leaves the others
  timeout "${T_SPEED:-140}" $PY bench/train_speed.py --ours-only --inputs $input --precision float64 float32 \
    --steps "$STEPS" --disp 50 --repeats 1 --table 64 --out "$runs/$input" 2>&1 | tee -a "$out/speed.txt"
done
echo "== 3. water, JAXMD_DP_KERNELS=jnp"
JAXMD_DP_KERNELS=jnp timeout "${T_JNP:-60}" $PY bench/train_speed.py --ours-only --inputs water --precision float64 \
  float32 --steps "$STEPS" --disp 50 --repeats 1 --out "$runs/water_jnp" 2>&1 | tee -a "$out/speed.txt"
echo "== 4. bare steps"
for c in copper_float32 copper_float64 almgcu_float64; do
  timeout "${T_BARE:-45}" $PY bench/step_time.py "$runs/in/$c.json" --precision "${c#*_}" --steps 100 \
    --table 0 64 2>&1 | grep -v 'cuda_timer' | tail -3 | tee -a "$out/step_time.txt"
done
echo "== 5. kernels"
timeout "${T_KERNELS:-60}" $PY bench/gpu_kernels.py --dtype float64 --repeats 20 2>&1 | tee "$out/kernels.txt"
echo "== 6. profile of the Cu float32 loop"
timeout "${T_PROFILE:-60}" $PY -m jaxmd_dp.train "$runs/in/copper_float32.json" -o "$runs/prof_run" --force \
  --profile "$runs/prof" training.numb_steps=20 2>&1 | grep -E 'profil|average'
tar -czf "$out/prof_copper.tgz" -C "$runs" prof && du -h "$out/prof_copper.tgz"
rm -rf "$runs"
