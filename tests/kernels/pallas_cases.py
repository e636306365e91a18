"""Small geometries shared by the Pallas kernel tests (interpret mode on CPU).

Each case: nf frames of a few tens of atoms, two types, sel = (8, 16) (truncation happens), with
  - "triclinic": a random skewed cell ~9–10 Å, coordinates partly outside the cell (unwrapped),
    padding atoms (type −1); rcut 4 Å (brute reach 1) or 3 Å for the cell list (2×2×3 cells);
  - "small": a ~3.6–4 Å skewed cell with rcut 4 Å > L/2 (reach 2: 125 images, ~80 neighbours, and
    more candidates than one register chunk, so the kernel's multi-chunk path runs);
  - "nopbc": a cluster without a box.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

RCUT_SMTH = 1.0
SEL = (8, 16)


class Case(NamedTuple):
    name: str
    coord: np.ndarray  # (nf, natoms, 3)
    box: np.ndarray | None  # (nf, 3, 3)
    atype: np.ndarray  # (nf, natoms)
    rcut: float


def _skewed(rng, diag, skew, nf):
    return np.stack([np.diag(diag) + rng.uniform(-1.0, 1.0, (3, 3)) * skew for _ in range(nf)])


def make_case(name: str, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    nf = 2
    if name == "triclinic":
        natoms = 32
        box = _skewed(rng, [9.0, 9.5, 10.0], 1.0, nf)
        coord = rng.uniform(-0.2, 1.2, (nf, natoms, 3)) @ box
        atype = rng.integers(0, 2, (nf, natoms))
        atype[:, -3:] = -1  # padding atoms
        return Case(name, coord, box, atype, 4.0)
    if name == "small":
        natoms = 16
        box = _skewed(rng, [3.6, 3.8, 4.0], 0.3, nf)
        coord = rng.uniform(0.0, 1.0, (nf, natoms, 3)) @ box
        return Case(name, coord, box, rng.integers(0, 2, (nf, natoms)), 4.0)
    if name == "nopbc":
        natoms = 24
        coord = rng.uniform(0.0, 7.0, (nf, natoms, 3))
        return Case(name, coord, None, rng.integers(0, 2, (nf, natoms)), 4.0)
    raise ValueError(name)


def stats(nnei: int, seed: int = 1, ntypes: int = 2):
    """Random but well-conditioned davg, dstd: (ntypes, nnei, 4)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(ntypes, nnei, 4)) * 0.1, rng.uniform(0.5, 1.5, (ntypes, nnei, 4))


def max_err(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def rel_err(a, b) -> float:
    """max |a − b| / max(1, max |b|)."""
    b = np.asarray(b, np.float64)
    return max_err(a, b) / max(1.0, float(np.max(np.abs(b))))


def energy_params(seed: int = 2):
    """Weights of a small nonlinear energy of R: E = Σ tanh(R W + b) · v."""
    rng = np.random.default_rng(seed)
    return {"W": rng.normal(size=(4, 3)) * 0.5, "b": rng.normal(size=(3,)) * 0.1, "v": rng.normal(size=(3,))}


def energy(params, R):
    h = jax.numpy.tanh(R @ params["W"] + params["b"])
    return jax.numpy.sum(h @ params["v"])


# XLA:CPU's backend optimisation level 0 roughly halves the compile time of the interpreted kernels
# (the test cost is almost all compilation; each program runs once).
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def run_fast(fn, *args):
    """``jax.jit(fn)(*args)``, compiled with :data:`FAST_COMPILE`."""
    return jax.jit(fn).trace(*args).lower().compile(FAST_COMPILE)(*args)


def water_case(seed: int = 0, per: int = 2) -> Case:
    """per³ rigid water molecules (O–H exactly 0.9572 Å: exact distance ties) in a cubic box, 1 frame."""
    rng = np.random.default_rng(seed)
    a = 3.105
    grid = np.stack(np.meshgrid(*[np.arange(per)] * 3, indexing="ij"), -1).reshape(-1, 3)
    oxy = (grid + 0.5) * a + rng.normal(scale=0.2, size=grid.shape)
    theta = np.deg2rad(104.52)
    coord, types = [], []
    for o in oxy:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        coord += [o, o + 0.9572 * q[0], o + 0.9572 * (np.cos(theta) * q[0] + np.sin(theta) * q[1])]
        types += [0, 1, 1]
    box = np.eye(3)[None] * a * per
    return Case("water", np.asarray(coord)[None], box, np.asarray(types)[None], 3.0)
