"""Write one frame of a DeePMD-kit data system as a LAMMPS data file (atom_style atomic, units metal).

    python make_data.py SYSTEM FRAME -o water.data

SYSTEM: a DeePMD-kit system directory (``type.raw``, ``type_map.raw``, ``set.*/coord.npy``, ``set.*/box.npy``);
FRAME: the frame's index over its sets in order. LAMMPS atom type t + 1 is the system's type t (its
``type_map.raw`` line t + 1): give LAMMPS ``pair_coeff * *`` the names in that order. Coordinates in Å, written
with every digit; a cell that is not already LAMMPS's (a along x, b in the xy plane) is rotated into it, the
coordinates with it (the same fractional coordinates; forces then come out in the rotated frame).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def read_frame(system: str | Path, frame: int):
    """(coord (natoms, 3) Å, box (3, 3) Å rows a, b, c, atype (natoms,), type_map) of one frame."""
    system = Path(system)
    atype = np.loadtxt(system / "type.raw", dtype=int, ndmin=1)
    type_map = (system / "type_map.raw").read_text().split()
    sets = sorted(system.glob("set.*"))
    for s in sets:
        coord = np.load(s / "coord.npy")
        if frame < len(coord):
            if not (s / "box.npy").exists():
                raise SystemExit(f"{system}: no box.npy (LAMMPS needs a periodic cell)")
            return coord[frame].reshape(-1, 3), np.load(s / "box.npy")[frame].reshape(3, 3), atype, type_map
        frame -= len(coord)
    raise SystemExit(f"{system}: no frame {frame} in {len(sets)} sets")


def lammps_cell(box: np.ndarray) -> np.ndarray:
    """LAMMPS's restricted triclinic cell (rows a, b, c; a = (ax, 0, 0), b = (bx, by, 0)) of the same shape."""
    a, b, c = box
    ax = np.linalg.norm(a)
    bx = b @ a / ax
    by = np.sqrt(b @ b - bx * bx)
    cx = c @ a / ax
    cy = (b @ c - bx * cx) / by
    cz = np.sqrt(c @ c - cx * cx - cy * cy)
    return np.array([[ax, 0.0, 0.0], [bx, by, 0.0], [cx, cy, cz]])


def write_data(
    path: str | Path, coord: np.ndarray, box: np.ndarray, atype: np.ndarray, ntypes: int, title: str
) -> None:
    """The LAMMPS data file: the cell from the origin, atoms ``id type x y z`` (types from 1)."""
    cell = lammps_cell(box)
    if not np.allclose(cell, box, rtol=0, atol=1e-12):
        coord = coord @ np.linalg.solve(box, cell)  # r = f·box → f·cell
    (ax, _, _), (bx, by, _), (cx, cy, cz) = cell.tolist()
    lines = [
        f"# {title}",
        "",
        f"{len(coord)} atoms",
        f"{ntypes} atom types",
        "",
        f"0 {ax!r} xlo xhi",
        f"0 {by!r} ylo yhi",
        f"0 {cz!r} zlo zhi",
    ]
    if bx or cx or cy:
        lines.append(f"{bx!r} {cx!r} {cy!r} xy xz yz")
    lines += ["", "Atoms # atomic", ""]
    lines += [
        f"{i + 1} {t + 1} {x!r} {y!r} {z!r}"
        for i, (t, (x, y, z)) in enumerate(zip(atype, np.asarray(coord, np.float64).tolist()))
    ]
    Path(path).write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system", help="DeePMD-kit system directory")
    p.add_argument("frame", type=int, help="frame index (over the sets in order)")
    p.add_argument("-o", "--output", default="water.data", help="LAMMPS data file to write")
    args = p.parse_args(argv)
    coord, box, atype, type_map = read_frame(args.system, args.frame)
    write_data(
        args.output,
        coord,
        box,
        atype,
        len(type_map),
        f"{args.system} frame {args.frame}; LAMMPS types 1.. = {' '.join(type_map)}",
    )
    print(f"wrote {args.output}: {len(coord)} atoms, types {' '.join(type_map)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
