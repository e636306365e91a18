"""A config's data section → loaded systems, as DeePMD-kit reads ``training_data`` / ``validation_data``.

- ``systems`` and ``rglob_patterns``: which directories are systems (:func:`~jaxmd_dp.data.sampler.system_paths`);
- ``set_prefix``: the frame-set directories of each (``<set_prefix>.*``, :func:`~jaxmd_dp.data.system.load_system`);
- ``min_pair_dist`` (training data only, as in DeePMD-kit): frames with two atoms closer than it are left
  out (:func:`drop_close_frames`); each system's count of left-out frames is shown in the DataSystem summary.

DeePMD-kit (PyTorch backend) draws its batches from every frame and then removes those frames from each
training batch, skipping a step whose frames are all removed; here they are left out before sampling, so
every batch is full and the batch counts and system probabilities are those of the kept frames.
Units: Å.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxmd_dp.data.sampler import system_paths
from jaxmd_dp.data.system import System, load_system, select_frames
from jaxmd_dp.errors import InputError

__all__ = ["drop_close_frames", "load_systems", "min_pair_distance"]


def min_pair_distance(coord: np.ndarray, box: np.ndarray | None, max_elems: int = 4_000_000) -> np.ndarray:
    """The shortest distance between two atoms of each frame, DeePMD-kit's ``compute_min_pair_dist_single``.

    coord: (nframes, natoms, 3) Å; box: (nframes, 3, 3) Å (rows are cell vectors) or None (no PBC).
    Periodic frames take the minimum image of the fractional differences (an atom and its own images do
    not count). Returns (nframes,) Å; inf for a frame of one atom.
    """
    coord = np.asarray(coord, np.float64)
    nf, natoms = coord.shape[:2]
    out = np.full(nf, np.inf)
    if natoms < 2:
        return out
    chunk = max(1, max_elems // (natoms * natoms))
    diagonal = np.eye(natoms, dtype=bool)
    for a in range(0, nf, chunk):
        c = coord[a : a + chunk]
        d = c[:, None, :, :] - c[:, :, None, :]  # (f, natoms, natoms, 3)
        if box is not None:
            cell = np.asarray(box[a : a + chunk], np.float64)
            frac = np.einsum("fabi,fij->fabj", d, np.linalg.inv(cell))
            d = np.einsum("fabi,fij->fabj", frac - np.round(frac), cell)
        r2 = np.einsum("fabk,fabk->fab", d, d)
        r2[:, diagonal] = np.inf
        out[a : a + chunk] = np.sqrt(r2.min(axis=(1, 2)))
    return out


def drop_close_frames(system: System, min_pair_dist: float, key: str = "training.training_data") -> System:
    """``system`` without its frames that have two atoms closer than ``min_pair_dist`` Å (kept: distance
    >= min_pair_dist, as DeePMD-kit); ``dropped`` counts them. An :class:`InputError` naming ``key``'s
    min_pair_dist when no frame is left."""
    keep = min_pair_distance(system.coord, system.box) >= min_pair_dist
    if not keep.any():
        raise InputError(
            f"{key}.min_pair_dist: every frame of {system.path} ({system.nframes}) has two atoms "
            f"closer than {min_pair_dist:g} Å; no frame of it is left"
        )
    return select_frames(system, keep)


def load_systems(
    systems: str | Sequence[str],
    type_map: Sequence[str] | None,
    *,
    set_prefix: str = "set",
    rglob_patterns: Sequence[str] | None = None,
    min_pair_dist: float = 0.0,
    key: str = "training.training_data",
) -> list[System]:
    """The systems of one data section (``key`` names it in errors): found from ``systems`` (a directory or a
    list, searched as DeePMD-kit does; ``rglob_patterns``), read with ``set_prefix``, and with
    ``min_pair_dist`` > 0 their frames with two atoms closer than it (Å) left out."""
    type_map = None if type_map is None else list(type_map)
    out = [load_system(p, type_map, set_prefix) for p in system_paths(systems, rglob_patterns, set_prefix)]
    if min_pair_dist > 0.0:
        out = [drop_close_frames(s, min_pair_dist, key) for s in out]
    return out
