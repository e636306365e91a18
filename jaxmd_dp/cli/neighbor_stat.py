"""Neighbour statistics of data sets and the sel to train with (DeePMD-kit's dp neighbor-stat).

The most neighbours of each type any atom has within ``rcut`` (DeePMD-kit's ``max_nbor_size``), the
shortest interatomic distance (``min_nbor_dist``), and the suggested ``sel``.

    python -m jaxmd_dp.neighbor_stat -s SYSTEMS [SYSTEMS ...] -r RCUT [-t TYPE ...] [--mixed-type] [--json]

SYSTEMS: DeePMD-kit npy systems, or directories searched for them. TYPE: the type map (element names; default:
the systems' ``type_map.raw``, else their type indices). The suggested ``sel`` is the trainer's ``sel: auto``
rule, DeePMD-kit's: max × 1.1 truncated, then rounded up to a multiple of 4 (``--sel-factor`` changes 1.1).

``--mixed-type`` (``--one-type``), for se_atten / se_atten_v2, whose ``sel`` is one number of neighbours of any
type: every neighbour counts as one type, so ``max_nbor_size`` is the most neighbours of any type one atom has
(DeePMD-kit's ``dp neighbor-stat --mixed-type``; at most, and usually less than, the sum of the per-type most).
"""

from __future__ import annotations

import argparse
import json
import math

from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry.neighbor_stat import NeighborStats, neighbor_stat, suggest_sel


def _type_map_of(paths: list[str]) -> list[str] | None:
    """The union of the systems' type_map.raw (order of first appearance), or None when none has one."""
    from pathlib import Path

    from jaxmd_dp.data.system import _read_type_map_raw

    names: list[str] = []
    found = False
    for p in paths:
        f = Path(p) / "type_map.raw"
        if f.is_file():
            found = True
            names += [n for n in _read_type_map_raw(f) if n not in names]
    return names if found else None


def load(system_args: list[str], type_map: list[str] | None):
    """(systems, type_map, ntypes) from command-line system paths (directories searched for systems)."""
    from jaxmd_dp.data.sampler import find_systems
    from jaxmd_dp.data.system import load_system

    paths = [p for arg in system_args for p in find_systems(arg)]
    if type_map is None:
        type_map = _type_map_of(paths)
    systems = [load_system(p, type_map) for p in paths]
    if type_map is not None:
        ntypes = len(type_map)
    else:
        ntypes = max(int(s.atype.max(initial=-1)) for s in systems) + 1
    return systems, type_map, ntypes


def report(st: NeighborStats, factor: float = 1.1) -> list[str]:
    """Human-readable lines; the ``min_nbor_dist:`` / ``max_nbor_size:`` lines are DeePMD-kit's."""
    sel = suggest_sel(st.max_nbor_size, factor)
    w = max(4, *(len(n) for n in st.type_map))
    lines = [
        f"# {st.nsystems} system(s), {st.nframes} frame(s), rcut {st.rcut:g} Å",
        f"{'type':<{w}s}  max_nbor  sel(auto:{factor:g})",
    ]
    lines += [f"{n:<{w}s}  {int(m):8d}  {s:8d}" for n, m, s in zip(st.type_map, st.max_nbor_size, sel)]
    dist = f"{st.min_nbor_dist:f}" if math.isfinite(st.min_nbor_dist) else "inf (no pair within rcut)"
    lines += [
        f"min_nbor_dist: {dist}",
        f"max_nbor_size: {[int(m) for m in st.max_nbor_size]}",
        f"suggested sel: {sel}  (max × {factor:g} truncated, rounded up to a multiple of 4)",
    ]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxmd_dp.neighbor_stat", description=__doc__.splitlines()[0])
    p.add_argument("-s", "--system", nargs="+", required=True, help="systems, or directories searched for them")
    p.add_argument("-r", "--rcut", type=float, required=True, help="cut-off radius, Å")
    p.add_argument(
        "-t",
        "--type-map",
        nargs="+",
        default=None,
        help="element names (default: the systems' type_map.raw, else their type indices)",
    )
    p.add_argument(
        "--mixed-type",
        "--one-type",
        dest="one_type",
        action="store_true",
        help="count neighbours of every type as one (the one sel of se_atten, se_atten_v2)",
    )
    p.add_argument("--sel-factor", type=float, default=1.1, help="head-room factor of the suggested sel (default 1.1)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    if not args.rcut > 0:
        raise InputError(f"--rcut {args.rcut}: must be positive")
    if not args.sel_factor >= 1:
        raise InputError(f"--sel-factor {args.sel_factor}: must be >= 1")
    systems, type_map, ntypes = load(args.system, args.type_map)
    st = neighbor_stat(systems, args.rcut, ntypes, args.one_type, type_map=type_map)
    if args.json:
        print(
            json.dumps(
                {
                    "rcut": st.rcut,
                    "type_map": st.type_map,
                    "max_nbor_size": st.max_nbor_size.tolist(),
                    "min_nbor_dist": st.min_nbor_dist if math.isfinite(st.min_nbor_dist) else None,
                    "sel": suggest_sel(st.max_nbor_size, args.sel_factor),
                    "nframes": st.nframes,
                    "nsystems": st.nsystems,
                }
            )
        )
    else:
        print("\n".join(report(st, args.sel_factor)))
    return 0
