"""Inputs with many atom types from existing DFT data, no new labels: the atoms of a system relabelled into
more types (each old type split into several by atom index), optionally with the cell replicated.

Shared by the many-type tests (``tests/model/test_many_types.py``) and the many-type benchmark
(``bench/ntypes_scaling.py``). Everything is written to a directory the caller gives (a temporary one);
the shared data is only read.

- :func:`split_types`: the new type of each atom: the k-th atom of old type t (in index order) gets
  ``splits[t][k % len(splits[t])]``;
- :func:`write_system`: one DeePMD-kit npy system, relabelled (``type.raw``, ``type_map.raw``) and
  replicated (``replicate`` cells along each cell vector: energies and virials × the number of cells,
  forces repeated; exact for any model whose energy is a sum of local terms);
- :data:`WATER_5`, :data:`ALMGCU_6`: the splits of water (O, H → 5 types) and Al-Cu-Mg (Mg, Al, Cu → 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

# water: O → types 0, 1; H → types 2, 3, 4
WATER_5 = {"splits": [[0, 1], [2, 3, 4]], "type_map": ["O", "O2", "H", "H2", "H3"]}
# Al-Cu-Mg (type_map Mg, Al, Cu): each element in two types
ALMGCU_6 = {"splits": [[0, 1], [2, 3], [4, 5]], "type_map": ["Mg", "Mg2", "Al", "Al2", "Cu", "Cu2"]}


def split_types(atype: np.ndarray, splits: Sequence[Sequence[int]]) -> np.ndarray:
    """atype (natoms,) old types → (natoms,) new types: the k-th atom of old type t gets
    ``splits[t][k % len(splits[t])]``."""
    atype = np.asarray(atype)
    out = np.empty_like(atype)
    for t, new in enumerate(splits):
        idx = np.flatnonzero(atype == t)
        out[idx] = np.asarray(new)[np.arange(idx.size) % len(new)]
    return out


def old_type_of(splits: Sequence[Sequence[int]]) -> np.ndarray:
    """(new ntypes,) the old type each new type was split from."""
    n = sum(len(s) for s in splits)
    out = np.empty(n, int)
    for t, new in enumerate(splits):
        out[list(new)] = t
    return out


def replicate_frames(
    coord: np.ndarray, box: np.ndarray, reps: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray, int]:
    """coord (nf, natoms, 3), box (nf, 3, 3) Å → the supercell's coord (nf, n·natoms, 3) (cell images in
    order, each a copy of the atoms shifted by a·box₀ + b·box₁ + c·box₂), box (nf, 3, 3), n."""
    shifts = np.array([(a, b, c) for a in range(reps[0]) for b in range(reps[1]) for c in range(reps[2])], float)
    image = np.einsum("ki,fij->fkj", shifts, box)  # (nf, n, 3)
    big = (coord[:, None, :, :] + image[:, :, None, :]).reshape(coord.shape[0], -1, 3)
    return big, box * np.asarray(reps, float)[None, :, None], len(shifts)


def write_system(
    src: str | Path,
    dst: str | Path,
    splits: Sequence[Sequence[int]],
    type_map: Sequence[str],
    replicate: tuple[int, int, int] = (1, 1, 1),
    max_frames: int | None = None,
    by_index: Sequence[int] | None = None,
) -> Path:
    """System ``src`` (DeePMD-kit npy: ``type.raw``, ``set.*/{coord,box,energy,force,virial}.npy``; its
    types index ``splits``) written to ``dst`` with the new types (:func:`split_types`) and ``type_map``,
    the cell replicated ``replicate`` times along its vectors, all sets as one ``set.000`` of at most
    ``max_frames`` frames. ``by_index``: instead of the split, the new type of atom i of the supercell is
    ``by_index[i % len(by_index)]`` whatever its old type (an input for timing, not for accuracy)."""
    src, dst = Path(src), Path(dst)
    atype = np.loadtxt(src / "type.raw", dtype=int, ndmin=1)
    sets = sorted(p for p in src.iterdir() if p.is_dir() and p.name.startswith("set."))
    arrays: dict[str, list[np.ndarray]] = {}
    for s in sets:
        for f in s.glob("*.npy"):
            arrays.setdefault(f.stem, []).append(np.load(f))
    data = {k: np.concatenate(v)[:max_frames] for k, v in arrays.items() if len(v) == len(sets)}
    nf, natoms = data["coord"].shape[0], atype.size
    coord, box, n = replicate_frames(
        data["coord"].reshape(nf, natoms, 3).astype(np.float64), data["box"].reshape(nf, 3, 3), replicate
    )
    out = {"coord": coord.reshape(nf, -1), "box": box.reshape(nf, 9)}
    if "energy" in data:
        out["energy"] = data["energy"].reshape(nf) * n
    if "force" in data:
        out["force"] = np.tile(data["force"].reshape(nf, natoms, 3), (1, n, 1)).reshape(nf, -1)
    if "virial" in data:
        out["virial"] = data["virial"].reshape(nf, 9) * n
    big_type = np.tile(atype, n)
    new = split_types(big_type, splits) if by_index is None else np.resize(np.asarray(by_index), big_type.size)
    (dst / "set.000").mkdir(parents=True, exist_ok=True)
    np.savetxt(dst / "type.raw", new, fmt="%d")
    (dst / "type_map.raw").write_text("\n".join(type_map) + "\n")
    for k, v in out.items():  # float64: the images' coordinates exactly the cell's shifted by its vectors
        np.save(dst / "set.000" / f"{k}.npy", np.asarray(v, np.float64))
    return dst
