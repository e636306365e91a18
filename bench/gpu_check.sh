#!/bin/bash
# The GPU checks, in parts, each with its own time limit (seconds, T_* variables below), so a slow or
# failing part leaves the others running:
#  1. DeePMD-kit's predictions with the Pallas kernels (tests/model/test_fixtures.py: float64 to 1e-10, float32
#     to 1e-5), the training step's written-out VJPs (tests/model/test_train_products.py) and the device store
#     of frames and neighbour lists (tests/train/test_neighbor_cache.py);
#  2. training speed of the three ASC22 inputs, ours only, exact nets and table 64, both precisions
#     (bench/train_speed.py; DeePMD-kit's install script gives a CPU build);
#  3. the bare training step, no loop around it (bench/step_time.py --table 0 64);
#  4. where the loop's time goes around the step (bench/loop_overhead.py: bare step, prepared batches, cached
#     lists, new frames, and a step that does nothing: the loop's floor);
#  5. the kernels alone, Pallas against jnp (bench/gpu_kernels.py);
#  6. a jax.profiler trace of the Cu float32 loop (OUTDIR/prof_copper.tgz, for TensorBoard or Perfetto);
#  7. the first step's compile, water float32, as the code compiles it (no GEMM autotuning on a GPU) and with
#     XLA's autotuning (--xla_gpu_autotune_level=4).
#   bash bench/gpu_check.sh OUTDIR
#   PARTS="1 2" SPEED_INPUTS=water bash bench/gpu_check.sh OUTDIR      # some parts, some inputs
# Needs ../shared (data, fixtures, bench inputs) beside the checkout, as every benchmark here does. Where only
# the checkout travels to the GPU machine, copy ../shared/{data,fixtures,bench} into a git-ignored folder of
# it and run `ln -sfn "$PWD/FOLDER" ../shared` there first. SPEED_INPUTS, BARE_INPUTS, LOOP_INPUTS and
# COMPILE_INPUTS choose the inputs of parts 2, 3, 4 and 7; STEPS and the limits are variables for a smoke
# run on a CPU. On an H200 part 1 takes ~160 s and part 2 ~20-45 s a run.
out=${1:?usage: bash bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
PY=${PYTHON:-python3}
STEPS=${STEPS:-500}
PARTS=" ${PARTS:-1 2 3 4 5 6 7} "
part() { [[ $PARTS == *" $1 "* ]] && echo "== $1. $2"; }  # true (and a heading) when part $1 is asked for
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
runs=$(mktemp -d)
mkdir -p "$runs/in"  # the inputs of parts 3, 4, 6 and 7, as bench/train_speed.py writes them
$PY -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; import train_speed as t
for name, prec in (('copper', 'float32'), ('copper', 'float64'), ('almgcu', 'float64'), ('water', 'float32'),
                   ('water', 'float64')):
    t.write_input(name, $STEPS, 50, prec, Path('$runs/in'))"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  $PY -c "import jax, flax, optax, orbax.checkpoint, numpy; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'numpy', numpy.__version__); print(jax.devices())"
  nproc
  git log -1 --format='commit %h %s' 2>/dev/null
} 2>&1 | tee -a "$out/env.txt"
if part 1 "fixtures (DeePMD-kit's predictions, kernels: auto)"; then
  timeout "${T_FIXTURES:-200}" $PY -m pytest -q -p no:cacheprovider tests/model/test_fixtures.py \
    tests/model/test_train_products.py tests/train/test_neighbor_cache.py 2>&1 | tail -15 | tee "$out/fixtures.txt"
fi
if part 2 "training speed"; then
  for input in ${SPEED_INPUTS:-water copper almgcu}; do  # each its own limit: a slow compile leaves the others
    timeout "${T_SPEED:-170}" $PY bench/train_speed.py --ours-only --inputs $input --precision float64 float32 \
      --steps "$STEPS" --disp 50 --repeats 1 --table 64 --out "$runs/$input" 2>&1 | tee -a "$out/speed.txt"
  done
fi
if part 3 "bare steps"; then
  for c in ${BARE_INPUTS:-water_float32 water_float64 copper_float32 copper_float64 almgcu_float64}; do
    timeout "${T_BARE:-45}" $PY bench/step_time.py "$runs/in/$c.json" --precision "${c#*_}" --steps 100 \
      --table 0 64 2>&1 | grep -v 'cuda_timer' | tail -3 | tee -a "$out/step_time.txt"
  done
fi
if part 4 "the loop around the step"; then
  for c in ${LOOP_INPUTS:-copper_float32 almgcu_float64 water_float32}; do
    timeout "${T_LOOP:-70}" $PY bench/loop_overhead.py "$runs/in/$c.json" training.embedding_table=64 \
      --steps "${LOOP_STEPS:-150}" --rounds 4 2>&1 | tail -6 | tee -a "$out/loop.txt"
  done
fi
if part 5 "kernels"; then
  timeout "${T_KERNELS:-60}" $PY bench/gpu_kernels.py --dtype float64 --repeats 20 2>&1 | tee "$out/kernels.txt"
fi
if part 6 "profile of the Cu float32 loop"; then
  timeout "${T_PROFILE:-60}" $PY -m jaxmd_dp.train "$runs/in/copper_float32.json" -o "$runs/prof_run" --force \
    --profile "$runs/prof" training.numb_steps=20 2>&1 | grep -E 'profil|average'
  tar -czf "$out/prof_copper.tgz" -C "$runs" prof && du -h "$out/prof_copper.tgz"
fi
if part 7 "first-step compile, GEMM autotuning off (the code's) and on (XLA's default)"; then
  for c in ${COMPILE_INPUTS:-water_float32}; do
    for flags in "" "--xla_gpu_autotune_level=4"; do
      echo "$c XLA_FLAGS='$flags'" | tee -a "$out/compile.txt"
      XLA_FLAGS="$flags" timeout "${T_COMPILE:-90}" $PY bench/startup.py "$runs/in/$c.json" --steps 2 2>&1 \
        | grep -E 'first training step|neighbour scan of' | tee -a "$out/compile.txt"
    done
  done
fi
rm -rf "$runs"
