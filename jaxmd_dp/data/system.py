"""One DeePMD-kit npy system: ``type.raw``, optional ``type_map.raw`` / ``nopbc``, and ``set.*/`` dirs.

Layout read (DeePMD-kit's "npy" format)::

    system/type.raw            natoms integers, atom type of each atom
    system/type_map.raw        optional, one element name per line (type index -> name)
    system/nopbc               optional marker file: no periodic boundary conditions, no box.npy
    system/set.000/coord.npy   (nframes, natoms*3) Å
    system/set.000/box.npy     (nframes, 9) Å, rows = cell vectors (absent with nopbc)
    system/set.000/energy.npy  (nframes,) or (nframes, 1) eV            optional
    system/set.000/force.npy   (nframes, natoms*3) eV/Å                 optional
    system/set.000/virial.npy  (nframes, 9) eV                          optional

The frame-set directories are ``<set_prefix>.*`` (``training_data.set_prefix``, DeePMD-kit's "set"),
read in sorted order.

Every problem with the files raises :class:`jaxmd_dp.errors.InputError` with one line naming the file.
"""

from __future__ import annotations

import dataclasses
import glob
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jaxmd_dp.errors import InputError

LABELS = ("energy", "force", "virial")


@dataclass(eq=False)
class System:
    """All frames of one system, float64, atom types already mapped to the global type map.

    path: the system directory as given.
    atype: (natoms,) int32, indices into ``type_map`` (the global type map when one was given).
    pbc: False when the system has a ``nopbc`` marker.
    coord: (nframes, natoms, 3) Å.
    box: (nframes, 3, 3) Å, rows are cell vectors; None when ``pbc`` is False.
    energy: (nframes,) eV or None.  force: (nframes, natoms, 3) eV/Å or None.
    virial: (nframes, 9) eV or None.
    set_nframes: frames in each ``set.*`` dir, in order (DeePMD-kit counts batches per set).
    type_map: element names that ``atype`` indexes (global map, else the system's type_map.raw,
        else None).
    dropped: frames left out when loading (``training_data.min_pair_dist``, see :func:`select_frames`);
        None when no frame filter was applied.
    """

    path: str
    atype: np.ndarray
    pbc: bool
    coord: np.ndarray
    box: np.ndarray | None
    energy: np.ndarray | None
    force: np.ndarray | None
    virial: np.ndarray | None
    set_nframes: tuple[int, ...] = ()
    type_map: list[str] | None = field(default=None)
    dropped: int | None = None

    @property
    def natoms(self) -> int:
        return int(self.atype.shape[0])

    @property
    def nframes(self) -> int:
        return int(self.coord.shape[0])


def load_system(path: str | Path, type_map: list[str] | None = None, set_prefix: str = "set") -> System:
    """Read one system directory into a :class:`System` (all sets concatenated, float64).

    type_map: the global element list (config ``type_map``). With a ``type_map.raw`` in the system,
    types are mapped by element name; without one, ``type.raw`` indices are used as they are.
    set_prefix: the frame-set directories are ``<set_prefix>.*`` (``training_data.set_prefix``).
    """
    root = Path(path)
    if not root.exists():
        raise InputError(f"{root}: system directory not found")
    if not root.is_dir():
        raise InputError(f"{root}: expected a system directory, found a file")
    raw_types = _read_type_raw(root / "type.raw")
    sys_map = _read_type_map_raw(root / "type_map.raw") if (root / "type_map.raw").is_file() else None
    if type_map is not None:
        _check_global_type_map(type_map)
    atype = _map_types(root, raw_types, sys_map, type_map)
    natoms = int(atype.shape[0])
    pbc = not (root / "nopbc").exists()

    set_dirs = sorted(d for d in root.glob(f"{glob.escape(set_prefix)}.*") if d.is_dir())
    if not set_dirs:
        other = (
            ""
            if set_prefix == "set" or not any(d.is_dir() for d in root.glob("set.*"))
            else (f"; it has set.* directories: set_prefix is {set_prefix!r}")
        )
        raise InputError(f"{root}: no {set_prefix}.* directories (DeePMD-kit npy format expected){other}")
    sets = [_load_set(d, natoms, pbc) for d in set_dirs]
    for key in LABELS:
        have = [key in s for s in sets]
        if any(have) and not all(have):
            with_, without = set_dirs[have.index(True)], set_dirs[have.index(False)]
            raise InputError(
                f"{without / (key + '.npy')}: missing, but {with_.name}/{key}.npy exists "
                f"(a label must be in every set of a system or in none)"
            )

    def cat(key: str) -> np.ndarray | None:
        return np.concatenate([s[key] for s in sets], axis=0) if key in sets[0] else None

    nf = [int(s["coord"].shape[0]) for s in sets]
    coord = cat("coord").reshape(-1, natoms, 3)
    box = cat("box").reshape(-1, 3, 3) if pbc else None
    energy = cat("energy")
    force = cat("force")
    return System(
        path=str(path),
        atype=atype,
        pbc=pbc,
        coord=coord,
        box=box,
        energy=None if energy is None else energy.reshape(-1),
        force=None if force is None else force.reshape(-1, natoms, 3),
        virial=cat("virial"),
        set_nframes=tuple(nf),
        type_map=list(type_map) if type_map is not None else sys_map,
    )


def select_frames(system: System, keep: np.ndarray) -> System:
    """The frames of ``system`` where ``keep`` (nframes,) bool is true, in order; ``set_nframes`` counts
    the kept frames of each set (sets left empty are left out) and ``dropped`` adds the frames left out."""
    keep = np.asarray(keep, bool)
    if keep.shape != (system.nframes,):
        raise ValueError(f"keep has shape {keep.shape}, expected ({system.nframes},)")
    bounds = np.cumsum((0, *(system.set_nframes or (system.nframes,))))
    per_set = (int(keep[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:]))

    def take(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[keep]

    return dataclasses.replace(
        system,
        coord=system.coord[keep],
        box=take(system.box),
        energy=take(system.energy),
        force=take(system.force),
        virial=take(system.virial),
        set_nframes=tuple(n for n in per_set if n),
        dropped=(system.dropped or 0) + int((~keep).sum()),
    )


def _read_type_raw(file: Path) -> np.ndarray:
    """type.raw -> (natoms,) int64 raw type indices (whitespace-separated integers)."""
    if not file.is_file():
        raise InputError(f"{file}: missing (every system needs type.raw with one type index per atom)")
    try:
        tokens = file.read_text().split()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot be read as text ({type(exc).__name__})") from None
    if not tokens:
        raise InputError(f"{file}: empty (expected one integer atom type per atom)")
    values = []
    for i, tok in enumerate(tokens):
        try:
            values.append(int(tok))
        except ValueError:
            raise InputError(f"{file}: atom {i} has type {tok!r}, not an integer") from None
    types = np.asarray(values, dtype=np.int64)
    if (types < 0).any():
        i = int(np.argmax(types < 0))
        raise InputError(f"{file}: atom {i} has negative type {types[i]}")
    return types


def _read_type_map_raw(file: Path) -> list[str]:
    """type_map.raw -> element names, one per non-empty line."""
    try:
        names = [ln.strip() for ln in file.read_text().splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot be read as text ({type(exc).__name__})") from None
    if not names:
        raise InputError(f"{file}: empty (expected one element name per line)")
    dup = _first_duplicate(names)
    if dup is not None:
        raise InputError(f"{file}: element {dup!r} is listed more than once")
    return names


def _check_global_type_map(type_map: list[str]) -> None:
    if not type_map or not all(isinstance(n, str) and n for n in type_map):
        raise InputError(f"type_map: expected a non-empty list of element names, got {type_map!r}")
    dup = _first_duplicate(list(type_map))
    if dup is not None:
        raise InputError(f"type_map: element {dup!r} is listed more than once")


def _first_duplicate(names: list[str]) -> str | None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            return n
        seen.add(n)
    return None


def _map_types(root: Path, raw: np.ndarray, sys_map: list[str] | None, type_map: list[str] | None) -> np.ndarray:
    """Raw type.raw indices -> (natoms,) int32 indices into the global type map."""
    used = [int(t) for t in np.unique(raw)]
    if sys_map is not None:
        for t in used:
            if t >= len(sys_map):
                raise InputError(
                    f"{root / 'type.raw'}: atom type {t} has no entry in type_map.raw "
                    f"({len(sys_map)} names: {' '.join(sys_map)})"
                )
        if type_map is None:
            return raw.astype(np.int32)
        lut = np.full(len(sys_map), -1, dtype=np.int64)
        for t in used:
            name = sys_map[t]
            if name not in type_map:
                raise InputError(
                    f"{root / 'type_map.raw'}: element {name!r} (type {t} in type.raw) is not in "
                    f"the type_map {list(type_map)}"
                )
            lut[t] = type_map.index(name)
        return lut[raw].astype(np.int32)
    if type_map is not None:
        bad = [t for t in used if t >= len(type_map)]
        if bad:
            raise InputError(
                f"{root / 'type.raw'}: atom type {bad[0]} has no entry in the type_map "
                f"{list(type_map)} (the system has no type_map.raw, so indices are used as they are)"
            )
    return raw.astype(np.int32)


def _npy_magic(file: Path) -> bool | None:
    """Whether ``file`` starts with numpy's .npy magic string (None: it cannot be read)."""
    try:
        with open(file, "rb") as f:
            return f.read(len(np.lib.format.MAGIC_PREFIX)) == np.lib.format.MAGIC_PREFIX
    except OSError:
        return None


def _load_npy(file: Path) -> np.ndarray:
    """Load a numeric .npy as float64; InputError if unreadable or not a numeric array."""
    try:
        arr = np.load(file, allow_pickle=False)
    except Exception as exc:  # bad magic, truncated, pickled objects, permission ...
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if _npy_magic(file) is False:  # numpy's own message then speaks of pickled data
            msg = "not a .npy file: it does not start with numpy's header, e.g. a text file under a .npy name"
        raise InputError(f"{file}: cannot be loaded as a .npy array ({msg})") from None
    if not isinstance(arr, np.ndarray):
        if hasattr(arr, "close"):
            arr.close()
        raise InputError(f"{file}: is an .npz archive, expected a single .npy array")
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{file}: has dtype {arr.dtype}, expected a real numeric array")
    return arr.astype(np.float64)


def _per_frame(arr: np.ndarray, file: Path, nframes: int | None, width: int, expect: str) -> np.ndarray:
    """Reshape to (nframes, width), checking the frame count and the values per frame."""
    if arr.ndim == 0:
        raise InputError(f"{file} is a scalar, expected one row per frame")
    if arr.ndim == 1 and width > 1:
        arr = arr.reshape(1, -1)  # a single frame stored flat, as DeePMD-kit allows
    nf = arr.shape[0]
    if nf == 0:
        raise InputError(f"{file} has 0 frames")
    if nframes is not None and nf != nframes:
        raise InputError(f"{file} has {nf} frames but coord.npy in the same set has {nframes}")
    per = int(np.prod(arr.shape[1:], dtype=np.int64))
    if per != width:
        raise InputError(f"{file} has {per} values per frame, expected {expect}")
    out = arr.reshape(nf, width)
    if not np.isfinite(out).all():
        frame = int(np.argmax(~np.isfinite(out).all(axis=1)))
        raise InputError(f"{file} contains NaN or Inf (frame {frame})")
    return out


def _load_set(set_dir: Path, natoms: int, pbc: bool) -> dict[str, np.ndarray]:
    """One set.* dir -> dict of (nframes, width) float64 arrays for the files present."""
    coord_file = set_dir / "coord.npy"
    if not coord_file.is_file():
        raise InputError(f"{coord_file}: missing (every set needs coord.npy)")
    expect = f"{natoms} atoms × 3 = {natoms * 3} from type.raw"
    out = {"coord": _per_frame(_load_npy(coord_file), coord_file, None, natoms * 3, expect)}
    nf = out["coord"].shape[0]
    if pbc:
        box_file = set_dir / "box.npy"
        if not box_file.is_file():
            raise InputError(f"{box_file}: missing (add box.npy, or a 'nopbc' file in the system dir)")
        box = _per_frame(_load_npy(box_file), box_file, nf, 9, "9 (a 3×3 cell, rows = cell vectors)")
        _check_volume(box, box_file)
        out["box"] = box
    widths = {
        "energy": (1, "1"),
        "force": (natoms * 3, f"{natoms} atoms × 3 = {natoms * 3}"),
        "virial": (9, "9 (a 3×3 virial)"),
    }
    for key, (width, what) in widths.items():
        f = set_dir / f"{key}.npy"
        if f.is_file():
            out[key] = _per_frame(_load_npy(f), f, nf, width, what)
    return out


def _check_volume(box: np.ndarray, file: Path) -> None:
    """Every cell must have positive volume: det(rows) > 0 (right-handed, not singular)."""
    cells = box.reshape(-1, 3, 3)
    det = np.linalg.det(cells)
    scale = np.prod(np.linalg.norm(cells, axis=2), axis=1)
    bad = det <= 1e-10 * scale
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(
            f"{file}: frame {i} has a cell with non-positive volume (det = {det[i]:.4g} Å³); "
            "rows must be right-handed, linearly independent cell vectors"
        )
