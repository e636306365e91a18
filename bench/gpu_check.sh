#!/bin/bash
# On a GPU machine (about 13 minutes on an H200 if every part runs; see the calls suggested below):
#  1. DeePMD-kit equivalence with the Pallas kernels on the GPU (the fixture tests), the training step's
#     products with written-out VJPs (tests/model/test_train_products.py), and the device store of
#     frames and lists (tests/train/test_neighbor_cache.py: its gathers and in-place writes on the GPU);
#  2. training speed of the three ASC22 inputs (bench/train_speed.py, ours only: DeePMD-kit's bench
#     script installs a CPU build), exact nets and table 64, both precisions;
#  3. the bare training step on water, Cu and Al-Cu-Mg (bench/step_time.py: no loop, batches cycled): water
#     float32's loop has taken 2.8-4.3 ms a step against float64's 1.7-2.5 (sessions 35, 42), Cu's and
#     Al-Cu-Mg's the same in both; whether the step itself or the loop differs;
#  4. where the loop's time goes around the step, Cu float32, Al-Cu-Mg float64 and water float32 with table 64
#     (bench/loop_overhead.py: the bare step, fit with prepared batches, with cached lists, with new
#     frames, and with a step that does nothing: the loop's floor);
#  5. the kernels' own timings (bench/gpu_kernels.py);
#  6. a profile of steps 4-8 of the Cu float32 loop (train --profile; OUTDIR/prof_copper.tgz, for
#     TensorBoard or Perfetto): where the host leaves the GPU idle;
#  7. the first step's compile, water float32, as the code compiles it (no GEMM autotuning on a GPU since
#     session 42: water float32 15.2-16.1 s against 29.8-48.4 s with it) and with XLA's autotuning
#     (--xla_gpu_autotune_level=4, which the code leaves alone)
#  8. what a jitted call costs the host per array (bench/dispatch_cost.py): the training state is 100
#     arrays (session 42 on the H200: 0.27 / 0.42 ms a call passing / updating 100, 0.05 / 0.06 ms for 3)
# Nine files in OUTDIR (a device tool may bring back only a few).
# Session 23 ran water with JAXMD_DP_KERNELS=jnp too (Pallas against jnp in training: no difference);
# that part is gone.
#   bash bench/gpu_check.sh OUTDIR
# Needs ../shared (data, fixtures, bench inputs) beside the checkout, as every benchmark here does. Where
# only the checkout travels to the GPU machine (session 23), copy ../shared/{data,fixtures,bench} into a
# git-ignored folder of it (55 MB without nopbc data) and run `ln -sfn "$PWD/FOLDER" ../shared` there first.
# Each part has its own time limit (seconds, in the variables below), so a slow or failing part leaves
# the others running; STEPS and the limits are variables for a smoke run on a CPU. SPEED_INPUTS, BARE_INPUTS,
# LOOP_INPUTS and COMPILE_INPUTS choose the inputs of parts 2, 3, 4 and 7. A session has 15 minutes of device
# time, the machine's start included (~30 s a start): session 35's two calls took 480 s (parts 1 and 2)
# and 207 s (parts 3 and 4, two loop inputs); session 42's three 240 s (parts 8 and 1, water float32 twice),
# 240 s (water and Cu, both precisions, twice) and 88 s (Al-Cu-Mg), 682 s with the starts. Part 1 takes
# ~160 s, part 2 ~20-45 s a run now that the steps compile without GEMM autotuning (the limits below are
# raised to match). In the order that matters most next:
#   PARTS="3 4" LOOP_INPUTS="water_float32 copper_float32" bash bench/gpu_check.sh OUTDIR
#                                                                (limits 5 x 45 + 2 x 70 s)
#   PARTS="6 5 2" SPEED_INPUTS=water bash bench/gpu_check.sh OUTDIR   (limits 60 + 60 + 170 s)
# and PARTS="1" after changes to the model or the kernels (limit 200 s).
out=${1:?usage: bash bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
PY=${PYTHON:-python3}
STEPS=${STEPS:-500}
PARTS=" ${PARTS:-1 2 3 4 5 6 7 8} "
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
  for c in ${LOOP_INPUTS:-copper_float32 almgcu_float64 water_float32}; do  # water: its step gathers its rows itself (session 26)
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
if part 8 "dispatch cost per array"; then
  timeout "${T_DISPATCH:-30}" $PY bench/dispatch_cost.py 2>&1 | tee "$out/dispatch.txt"
fi
rm -rf "$runs"
