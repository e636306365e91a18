"""The neighbour-list build of the ASC22 inputs' training frames, variant against variant (µs per batch).

    python bench/gpu_neighbor.py [--inputs water copper almgcu] [--frames 1] [--repeats 30]
        [--variants pallas-nearest pallas-any jnp-any jnp-nearest]

For each input (``bench/train_speed.py``'s names: its DeePMD-kit input.json in ../shared/bench), one system
of each atom count among its training systems (at most ``--systems``), a batch of ``--frames`` frames, the
list built with the input's rcut and sel as the training step builds it (``neighbor.build``): with the
Pallas kernel or jnp (``kernels``), nearest first or in candidate order ("any", what training stores).
Prints per system: atoms, search method, candidates per atom, the most neighbours of a type (against sel),
and per variant the median time of ``--repeats`` jitted calls after one warm-up (compile excluded), with
the per-type neighbour sets checked equal to the first variant's. Meant for a GPU; on a CPU the Pallas
variants run interpreted (``--variants jnp-any jnp-nearest`` there, or a tiny smoke run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)
import jax
import numpy as np
import train_speed as ts

from jaxmd_dp.data.load import load_systems

jax.config.update("jax_enable_x64", True)

from jaxmd_dp.geometry import neighbor  # noqa: E402


def _systems(name: str, limit: int):
    src = ts.SHARED / ts.INPUTS[name]
    d = json.loads(src.read_text())
    paths = d["training"]["training_data"]["systems"]
    paths = [paths] if isinstance(paths, str) else paths
    desc = d["model"]["descriptor"]
    seen, out = set(), []
    for p in paths:
        (s,) = load_systems([str((src.parent / p).resolve())], d["model"].get("type_map"))
        if s.natoms not in seen:
            seen.add(s.natoms)
            out.append(s)
        if len(out) == limit:
            break
    sel = desc["sel"] if isinstance(desc["sel"], list) else [desc["sel"]]
    return out, float(desc["rcut"]), tuple(int(x) for x in sel)


def _sets(nl, sel):
    """Per type block, each row's (neighbour, image) pairs as sorted integer keys (order-free)."""
    idx, shift = np.asarray(nl.idx).astype(np.int64), np.rint(np.asarray(nl.shift)).astype(np.int64) + 50
    key = np.where(idx >= 0, ((idx * 100 + shift[..., 0]) * 100 + shift[..., 1]) * 100 + shift[..., 2], -1)
    bounds = np.cumsum((0,) + tuple(sel))
    return [np.sort(key[..., a:b], axis=-1) for a, b in zip(bounds[:-1], bounds[1:])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", nargs="+", default=["water", "copper", "almgcu"], choices=sorted(ts.INPUTS))
    p.add_argument("--frames", type=int, default=1)
    p.add_argument("--systems", type=int, default=3, help="systems (distinct atom counts) per input")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--variants", nargs="+", default=["pallas-nearest", "pallas-any", "jnp-any", "jnp-nearest"])
    args = p.parse_args(argv)
    print(f"backend {jax.default_backend()}, {args.frames} frame(s) a batch, µs: median of {args.repeats}")
    print("| input | atoms | method | candidates | most of a type / sel | " + " | ".join(args.variants) + " |")
    print("|---" * (5 + len(args.variants)) + "|")
    for name in args.inputs:
        systems, rcut, sel = _systems(name, args.systems)
        for s in systems:
            nb = min(args.frames, s.nframes)
            coord, box = s.coord[:nb], None if s.box is None else s.box[:nb]
            spec = neighbor.allocate(s.coord, s.box, rcut, sel)
            cells, ref, most = [], None, None
            for v in args.variants:
                kernels, order = v.split("-")
                fn = jax.jit(lambda c, b, t, k=kernels, o=order: neighbor.build(spec, c, b, t, k, o))
                nl = jax.block_until_ready(fn(coord, box, s.atype))
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    jax.block_until_ready(fn(coord, box, s.atype))
                    times.append(time.perf_counter() - t0)
                same = ""
                if ref is None:
                    ref, most = _sets(nl, sel), np.asarray(nl.nneigh).max(axis=(0, 1))
                elif not all(np.array_equal(a, b) for a, b in zip(ref, _sets(nl, sel))):
                    same = " (other neighbours!)"
                cells.append(f"{statistics.median(times) * 1e6:.0f}{same}")
            fill = ", ".join(f"{m}/{n}" for m, n in zip(most, sel))
            row = [name, s.natoms, spec.method, neighbor.candidates_per_atom(spec), fill, *cells]
            print("| " + " | ".join(str(x) for x in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
