"""NVE molecular dynamics of liquid water (192 atoms, periodic) with a trained model, and its energy drift.

    python examples/md_water.py [MODEL] [--steps 1000] [--dt 0.5] [--temperature 300] [--frame 0]

MODEL: a model file (.jaxdp), model directory, training output directory or checkpoint, as
``jaxmd_dp.api.load_model`` reads them.
Default: DeePMD-kit's reference water model (../shared/fixtures/water_se_e2_a), converted on the fly.
The starting frame comes from water ``data_3`` (``--data`` or, in order: the repo's data/water/data_3,
../shared/data/water/data_3, $JAXMD_DP_DATA_MIRROR/water/data_3).

Units: jax-md's metal units (Å, eV, amu), so the time unit is sqrt(amu·Å²/eV) = 10.1805 fs and a
step of dt fs is ``dt * jaxmd_dp.md.FS`` (1 fs = 0.0982269 units). Masses O 15.999, H 1.008 amu;
Maxwell-Boltzmann velocities at --temperature (seeded); float64; velocity Verlet (jax_md.simulate.nve).
Needs the ``md`` extra: pip install -e '.[md]'.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def default_data() -> Path:
    cands = [REPO / "data/water/data_3", SHARED / "data/water/data_3"]
    mirror = os.environ.get("JAXMD_DP_DATA_MIRROR", "").strip()
    if mirror and "://" not in mirror:
        cands.append(Path(mirror) / "water/data_3")
    for c in cands:
        if (c / "type.raw").exists():
            return c
    sys.exit("no water data_3 found (tried " + ", ".join(map(str, cands)) + "); pass --data")


def default_model(tmp: str) -> Path:
    from jaxmd_dp.cli.convert_deepmd import convert

    fix = SHARED / "fixtures/water_se_e2_a"
    if not (fix / "params.npz").exists():
        sys.exit(f"no MODEL given and DeePMD-kit's fixture {fix} is missing")
    print(f"converting DeePMD-kit's {fix}")
    return convert(fix / "params.npz", fix / "out.json", Path(tmp) / "water_se_e2_a")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", nargs="?", help="model directory / training output (default: DeePMD-kit fixture)")
    p.add_argument("--data", type=Path, help="water system directory (default: data_3)")
    p.add_argument("--frame", type=int, default=0, help="starting frame of the system")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--dt", type=float, default=0.5, help="time step, fs")
    p.add_argument("--temperature", type=float, default=300.0, help="initial temperature, K")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skin", type=float, default=1.0, help="neighbour-list skin, Å")
    p.add_argument("--every", type=int, default=50, help="steps between energy prints")
    args = p.parse_args(argv)
    if args.steps % args.every:
        p.error("--steps must be a multiple of --every")

    import numpy as np

    import jaxmd_dp  # noqa: F401  (float64)
    from jaxmd_dp import md
    from jaxmd_dp.api import load_model
    from jaxmd_dp.data.system import load_system

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(args.model or default_model(tmp))
    system = load_system(args.data or default_data(), model.type_map)
    R = system.coord[args.frame]
    box = None if system.box is None else system.box[args.frame]
    atype = system.atype
    mass = md.masses(model.type_map, atype)
    n = len(atype)
    print(
        f"{n} atoms ({', '.join(f'{(atype == t).sum()} {s}' for t, s in enumerate(model.type_map))}), "
        f"box {None if box is None else np.round(np.diag(box), 3).tolist()} Å, dt {args.dt} fs "
        f"= {args.dt * md.FS:.6f} time units, {args.steps} steps, T0 {args.temperature} K"
    )

    neighbor_fn, energy = md.energy_fn(model, box, atype, skin=args.skin)
    t = time.perf_counter()
    run = md.run_nve(
        energy,
        neighbor_fn,
        R,
        mass,
        dt_fs=args.dt,
        steps=args.steps,
        temperature_K=args.temperature,
        seed=args.seed,
        record_every=args.every,
    )
    wall = time.perf_counter() - t
    print(
        f"{'t (fs)':>8s} {'E_pot (eV)':>16s} {'E_kin (eV)':>11s} {'E_tot (eV)':>16s} {'T (K)':>8s} "
        f"{'(E-E0)/N (eV)':>14s}"
    )
    for i in range(len(run.time_fs)):
        print(
            f"{run.time_fs[i]:8.1f} {run.potential[i]:16.6f} {run.kinetic[i]:11.6f} {run.total[i]:16.6f} "
            f"{run.temperature[i]:8.1f} {(run.total[i] - run.total[0]) / n:14.3e}"
        )
    d = run.drift_per_atom()
    print(
        f"energy drift per atom over {args.steps} steps ({args.steps * args.dt:g} fs): "
        f"max |E-E0| = {d['max_dev']:.2e} eV, E_end-E0 = {d['end']:.2e} eV, "
        f"slope = {d['slope_per_ps']:.2e} eV/ps"
    )
    print(f"wall time {wall:.1f} s ({wall / args.steps * 1e3:.1f} ms/step, compilation included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
