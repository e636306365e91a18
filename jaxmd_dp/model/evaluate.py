"""The one prediction path: neighbour lists, then energy, forces and virial, for frames of one shape.

    ev = Evaluator(hyper, params, stats)
    pred = ev(coord, box, atype)        # coord (nf, natoms, 3) Å, box (nf, 3, 3) Å or None
    pred.energy, pred.force, pred.virial, pred.atom_energy, ev.last_nneigh_max

:func:`predict_frames` is the traced function; :class:`Evaluator` compiles it once per input shape with the
weights as arguments (``python -m jaxmd_dp.test``, :meth:`Model.predict <jaxmd_dp.model.trained.Model.predict>`,
the ASE calculator, ``Trainer.evaluate``), and ``freeze --export`` serialises it for one fixed neighbour-list
spec (:func:`jaxmd_dp.export.jax_export.export_energy_force`).
"""

from __future__ import annotations

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.data.system import System
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import ModelHyper, Prediction, Stats, predict, type_capacity
from jaxmd_dp.model.plan import ExecutionPlan
from jaxmd_dp.runtime.inline_trace import inline_trace


def predict_frames(
    hyper: ModelHyper,
    spec: neighbor.NeighborSpec,
    capacity: tuple[int, ...] | None,
    kernels: str | None,
    params,
    stats: Stats,
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
) -> tuple[Prediction, jax.Array, jax.Array]:
    """Neighbour lists for ``spec`` (DeePMD-kit's: the nearest ``sel[t]`` of each type within rcut), then
    :func:`~jaxmd_dp.model.energy.predict`.

    coord: (nf, natoms, 3) Å; box: (nf, 3, 3) Å or None; atype: (natoms,) int. capacity: see
    :func:`~jaxmd_dp.model.energy.type_capacity` (None: natoms for every type); kernels: "pallas" | "jnp" |
    "auto" | None (``geometry.neighbor.build``). Returns (Prediction, nneigh_max (len(sel),) the most
    neighbours of each type any atom had, or of any type for a descriptor of mixed types (more than ``sel``
    were dropped), cell_overflow () bool).
    """
    nl = neighbor.build(spec, coord, box, atype, kernels)
    pred = predict(hyper, params, stats, coord, box, atype, nl, plan=ExecutionPlan(capacity, kernels))
    return pred, jnp.max(nl.nneigh, axis=(0, 1)), nl.cell_overflow


@functools.lru_cache(maxsize=16)
def _compiled(hyper: ModelHyper):
    """:func:`predict_frames` jitted for one model shape, shared by every Evaluator (weights are arguments;
    spec, capacity and kernels static)."""
    return jax.jit(inline_trace(functools.partial(predict_frames, hyper)), static_argnums=(0, 1, 2))


class Evaluator:
    """:func:`predict_frames` compiled for one model, with a neighbour-list spec per input shape (numpy in
    and out). ``params``/``stats`` may be swapped between calls: they are arguments of the compiled
    function, shared by every Evaluator of the same hyper-parameters."""

    def __init__(self, hyper: ModelHyper, params, stats: Stats, kernels: str | None = None):
        self.hyper, self.params, self.kernels = hyper, params, kernels
        self.stats = Stats(*(jnp.asarray(s) for s in stats))
        self._specs: dict = {}
        self.last_nneigh_max = np.zeros(hyper.ntypes, int)
        self._run = _compiled(hyper)

    def _spec(self, coord, box, capacity_factor: float | None = None):
        key = (coord.shape[1], box is None)
        spec = self._specs.get(key)
        if capacity_factor is not None:  # the last spec's cells overflowed: the same method, roomier cells
            spec = neighbor.allocate(
                coord, box, self.hyper.rcut, self.hyper.sel, method=spec.method, capacity_factor=capacity_factor
            )
        elif spec is None or not neighbor.fits(spec, box):
            spec = neighbor.allocate(coord, box, self.hyper.rcut, self.hyper.sel)
        self._specs[key] = spec
        return spec

    def __call__(self, coord, box, atype) -> Prediction:
        """coord: (nf, natoms, 3) Å; box: (nf, 3, 3) Å or None; atype: (natoms,) → :class:`Prediction` (numpy)."""
        coord = np.asarray(coord, np.float64)
        box = None if box is None else np.asarray(box, np.float64)
        atype = np.asarray(atype)
        capacity = type_capacity([atype], self.hyper.ntypes)
        spec = self._spec(coord, box)
        for _ in range(3):
            out, nmax, overflow = self._run(spec, capacity, self.kernels, self.params, self.stats, coord, box, atype)
            if not bool(overflow):
                break
            spec = self._spec(coord, box, capacity_factor=2.0)
        self.last_nneigh_max = np.asarray(nmax)
        return Prediction(*(np.asarray(x) for x in out))


def predict_system(ev: Evaluator, system: System, nframes: int = 0, chunk: int = 8):
    """Predictions for the first ``nframes`` frames (0: all), evaluated ``chunk`` frames at a time.

    Returns dict energy (n,), force (n, natoms, 3), virial (n, 9), atom_energy (n, natoms)."""
    n = system.nframes if nframes <= 0 else min(nframes, system.nframes)
    chunk = max(1, min(chunk, n))
    parts = []
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        sl = slice(a, b)
        coord, box = system.coord[sl], None if system.box is None else system.box[sl]
        if b - a < chunk:  # keep one compiled shape: pad the last chunk with copies of its first frame
            pad = chunk - (b - a)
            coord = np.concatenate([coord, np.repeat(coord[:1], pad, 0)])
            box = None if box is None else np.concatenate([box, np.repeat(box[:1], pad, 0)])
        p = ev(coord, box, system.atype)
        parts.append({k: v[: b - a] for k, v in p._asdict().items()})
        over = ev.last_nneigh_max > np.asarray(ev.hyper.sel)
        if over.any():
            print(
                f"warning: {system.path}: most neighbours {ev.last_nneigh_max.tolist()} exceed sel "
                f"{list(ev.hyper.sel)}; the farthest were dropped (as DeePMD-kit does)",
                file=sys.stderr,
            )
    return {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}


def errors(system: System, pred: dict) -> dict:
    """MAE/RMSE of energy (total, per atom), force and virial (total, per atom) where labels exist.

    Values: (error, count) pairs, count = number of items averaged, for weighted averages."""
    n = len(pred["energy"])
    na = system.natoms
    out = {}

    def add(name, diff):
        out["mae_" + name] = (float(np.mean(np.abs(diff))), diff.size)
        out["rmse_" + name] = (float(np.sqrt(np.mean(diff**2))), diff.size)

    if system.energy is not None:
        de = pred["energy"] - system.energy[:n]
        add("e", de)
        add("ea", de / na)
    if system.force is not None:
        add("f", pred["force"] - system.force[:n])
    if system.virial is not None and system.pbc:
        dv = pred["virial"] - system.virial[:n]
        add("v", dv)
        add("va", dv / na)
    return out
