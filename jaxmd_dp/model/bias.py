"""A trained model's per-type energy bias set from data, DeePMD-kit's ``change_out_bias``
(``deepmd/dpmodel/atomic_model/base_atomic_model.py``, ``deepmd/dpmodel/utils/stat.py``
``compute_output_stats``, ``deepmd/utils/out_stat.py`` ``compute_stats_from_redu``).

Two modes, on sampled frames with energy labels (counts n (nframes, ntypes) atoms of each type, E (nframes,) eV):

- ``change`` ("change-by-statistic", what fine-tuning, ``change_bias_after_training`` and ``dp change-bias``
  do by default): the model predicts each frame's energy E_pred with its current bias, and the least-squares
  solution δ of n·δ = E − E_pred is added to the bias;
- ``set`` ("set-by-statistic"): the bias is the least-squares solution b of n·b = E, as for a new model.

Both solve with ``np.linalg.lstsq(n, ·, rcond=None)`` (:func:`jaxmd_dp.geometry.stats.energy_bias`):
the minimum-norm solution when n is singular (one composition; a type absent from the frames gets 0, or keeps
its bias with ``change``). Forces and virials do not depend on the bias. Units: eV.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from jaxmd_dp.geometry.stats import energy_bias
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.model.evaluate import Evaluator

__all__ = ["MODES", "BiasChange", "change_energy_bias", "predicted_energies"]

MODES = ("change", "set")


class BiasChange(NamedTuple):
    """old, new: the energy bias per type (ntypes,) eV; rmse_per_atom: the RMS over the frames of
    (E − n·new − E_pred without bias change) / natoms after the regression, eV (DeePMD-kit logs it)."""

    old: np.ndarray
    new: np.ndarray
    rmse_per_atom: float


def _labelled(frames: Iterable[dict]) -> list[dict]:
    return [f for f in frames if f.get("energy") is not None and float(f.get("find_energy", 1.0)) > 0.0]


def predicted_energies(hyper: ModelHyper, params, stats: Stats, frames: Iterable[dict], chunk: int = 8) -> list:
    """The model's energies (nframes,) eV of each batch of ``frames`` (dicts with coord (nf, natoms, 3) Å,
    box (nf, 3, 3) Å, atype (natoms,), pbc), ``chunk`` frames per call (the last chunk padded with copies of its
    first frame, so one compiled shape per atom count)."""
    ev = Evaluator(hyper, params, stats)
    out = []
    for f in frames:
        coord = np.asarray(f["coord"], np.float64)
        box = np.asarray(f["box"], np.float64) if f.get("pbc", True) else None
        n = coord.shape[0]
        size = max(1, min(chunk, n))
        parts = []
        for a in range(0, n, size):
            b = min(n, a + size)
            c, bx = coord[a:b], None if box is None else box[a:b]
            if b - a < size:
                pad = size - (b - a)
                c = np.concatenate([c, np.repeat(c[:1], pad, 0)])
                bx = None if bx is None else np.concatenate([bx, np.repeat(bx[:1], pad, 0)])
            parts.append(ev(c, bx, f["atype"]).energy[: b - a])
        out.append(np.concatenate(parts))
    return out


def change_energy_bias(
    hyper: ModelHyper, params, stats: Stats, frames: Iterable[dict], mode: str = "change"
) -> BiasChange:
    """The energy bias ``mode`` (:data:`MODES`) gives on ``frames`` (batches of
    :func:`jaxmd_dp.geometry.stats.sample_stat_frames`: coord, box, atype, pbc, energy, find_energy).
    Raises ValueError when no frame has an energy label, or for an unknown mode."""
    if mode not in MODES:
        raise ValueError(f"bias mode {mode!r} is not one of {list(MODES)}")
    frames = _labelled(frames)
    if not frames:
        raise ValueError("energy bias: no sampled frame has an energy label")
    old = np.asarray(stats.energy_bias, np.float64)
    if mode == "set":
        base = [np.zeros(np.shape(f["energy"])) for f in frames]
        new = energy_bias(frames, hyper.ntypes)
    else:
        base = predicted_energies(hyper, params, stats, frames)
        delta = energy_bias([{**f, "energy": np.asarray(f["energy"]) - p} for f, p in zip(frames, base)], hyper.ntypes)
        new = old + delta
    residual = []
    for f, p in zip(frames, base):
        e = np.asarray(f["energy"], np.float64).reshape(-1)
        atype = np.broadcast_to(np.asarray(f["atype"]), (e.shape[0], np.shape(f["atype"])[-1]))
        counts = np.stack([(atype == t).sum(axis=-1) for t in range(hyper.ntypes)], axis=-1).astype(np.float64)
        shift = counts @ (new - (old if mode == "change" else 0.0))
        residual.append((e - p - shift) / (atype >= 0).sum(axis=-1))
    rmse = float(np.sqrt(np.mean(np.concatenate(residual) ** 2)))
    return BiasChange(old, np.asarray(new, np.float64), rmse)
