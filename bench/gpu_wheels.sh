#!/usr/bin/env bash
# What bench/gpu_side_by_side.sh needs on a GPU machine that has no package index, gathered here (a machine
# with one): DeePMD-kit 3.2.0's wheel and the dependencies its PyTorch and JAX backends import that such an
# image (jax with CUDA, flax, optax, orbax, torch, numpy, scipy, h5py, pyyaml, einops, ml_dtypes, msgpack,
# pandas, wrapt) lacks: mendeleev (both backends' training imports it) and its own, and mpich (whose libmpi
# DeePMD-kit's PyPI build loads when its PyTorch backend starts), into .whl/ (Python 3.12, x86-64); and the
# three ASC22 inputs and their data into shared/ (both git-ignored). Then on the GPU machine, from the
# checkout:  bash bench/gpu_side_by_side.sh OUTDIR
#   bash bench/gpu_wheels.sh [PYTHON_VERSION]        (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
ver="${1:-3.12}"
mkdir -p .whl shared/data
pkgs=(deepmd-kit==3.2.0 dargs typeguard wcmatch bracex array-api-compat lmdb
      mendeleev==1.3.0 sqlalchemy==2.1.9 deprecated==1.3.1 pint==0.24.4 flexcache==0.3 flexparser==0.4
      platformdirs==4.14.8 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
      typing-inspection==0.4.5 pyfiglet==0.8.post1 mpich==5.0.2)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$ver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl "${pkgs[@]}"
cp -r ../shared/bench shared/
for d in water cu_asc22 almgcu_jiang2021_subset; do cp -r "../shared/data/$d" shared/data/; done
du -sh .whl shared
