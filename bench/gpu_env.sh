# Sourced by the GPU scripts (gpu_side_by_side.sh, gpu_loop_options.sh, gpu_profile.sh) from the checkout's
# root, with their OUTDIR argument: sets $out (made) and $PY ($PYTHON or python3), links the checkout's shared/
# as ../shared where that is missing (bench/gpu_wheels.sh fills it), and sets jax's environment for a GPU run.
out="$(realpath -m "${1:?usage: bash $0 OUTDIR}")"
mkdir -p "$out"
PY="${PYTHON:-python3}"
[ -e ../shared ] || ln -sfn "$PWD/shared" ../shared
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
