"""Evaluate a model on frames: neighbour lists + energy/force/virial, compiled once per shape.

    ev = Evaluator(hyper, params, stats)
    pred = ev(coord, box, atype)        # coord (nf, natoms, 3) Å, box (nf, 3, 3) Å or None
    pred.energy, pred.force, pred.virial, pred.atom_energy, ev.last_nneigh_max
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.inline_trace import inline_trace
from jaxmd_dp.model.energy import ModelHyper, Prediction, Stats, predict, type_capacity


@functools.lru_cache(maxsize=16)
def _compiled_run(hyper: ModelHyper):
    """One jitted prediction function per model shape, shared by every Evaluator (weights are arguments)."""

    def run(spec, capacity, params, stats, coord, box, atype):
        nl = neighbor.build(spec, coord, box, atype)
        pred = predict(hyper, params, stats, coord, box, atype, nl, capacity)
        return pred, jnp.max(nl.nneigh, axis=(0, 1)), nl.cell_overflow

    return jax.jit(inline_trace(run), static_argnums=(0, 1))


class Evaluator:
    """Jitted predictions for one model; a neighbour-list spec and a compiled function per input shape."""

    def __init__(self, hyper: ModelHyper, params, stats: Stats):
        self.hyper, self.params = hyper, params
        self.stats = Stats(*(jnp.asarray(s) for s in stats))
        self._specs: dict = {}
        self.last_nneigh_max = np.zeros(hyper.ntypes, int)

        self._run = _compiled_run(hyper)

    def _spec(self, coord, box):
        key = (coord.shape[1], box is None)
        spec = self._specs.get(key)
        if spec is None or not neighbor.fits(spec, box):
            spec = neighbor.allocate(coord, box, self.hyper.rcut, self.hyper.sel)
            self._specs[key] = spec
        return spec

    def __call__(self, coord, box, atype) -> Prediction:
        """coord: (nf, natoms, 3) Å; box: (nf, 3, 3) Å or None; atype: (natoms,) → :class:`Prediction` (numpy)."""
        coord = np.asarray(coord, np.float64)
        box = None if box is None else np.asarray(box, np.float64)
        spec = self._spec(coord, box)
        for _ in range(3):
            capacity = type_capacity([atype], self.hyper.ntypes)
            out, nmax, overflow = self._run(spec, capacity, self.params, self.stats, coord, box, np.asarray(atype))
            if not bool(overflow):
                break
            spec = neighbor.allocate(coord, box, self.hyper.rcut, self.hyper.sel, method=spec.method, capacity_factor=2.0)
            self._specs[(coord.shape[1], box is None)] = spec
        self.last_nneigh_max = np.asarray(nmax)
        return Prediction(*(np.asarray(x) for x in out))

