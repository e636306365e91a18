#!/usr/bin/env bash
# MPI for data-parallel training (`mpirun -np N python -m jaxmd_dp.train ...`): mpi4py and mpi4jax in the
# virtual environment VENV, built against the `mpich` wheel (which provides mpicc and mpiexec), so no system
# MPI is needed. pip cannot do this as a package extra: it builds mpi4jax in an isolated environment that
# has no MPI. Run after `pip install -e .`; needs a C compiler.
#   bash .ci/install_mpi4jax.sh VENV        (e.g. bash .ci/install_mpi4jax.sh .venv)
set -euo pipefail
venv="$(cd "${1:?usage: install_mpi4jax.sh VENV}" && pwd)"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
"${pip[@]}" mpich mpi4py "setuptools>=82.0.1" "nanobind>=2" wheel cython
# Built from source against the wheel's mpicc; /usr/local/bin off PATH, so that a CUDA nvcc or another MPI
# installed there is not picked up (a CPU build).
PATH="$(echo "$PATH" | tr ':' '\n' | grep -v '^/usr/local/bin$' | paste -sd:)" \
  MPI4JAX_BUILD_MPICC="$venv/bin/mpicc" \
  "${pip[@]}" --no-build-isolation --no-cache-dir mpi4jax
"$venv/bin/python" -c "import mpi4jax, mpi4py; print('mpi4jax', mpi4jax.__version__, 'installed')"
