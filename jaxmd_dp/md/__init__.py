"""Molecular dynamics with a trained model: a jax-md energy function and an ASE calculator.

jax-md (``pip install 'jaxmd_dp[md]'``), in jax-md's units (metal: Å, eV, amu, so the time unit is
sqrt(amu·Å²/eV) = 10.1805 fs and 1 fs = :data:`FS` = 0.0982269 time units)::

    from jax_md import simulate, space
    from jaxmd_dp import md
    from jaxmd_dp.api import load_model

    model = load_model("runs/water")                                  # a run, checkpoint, model dir or file
    neighbor_fn, energy = md.energy_fn(model, box, atype)             # box (3, 3) Å, rows = cell vectors
    _, shift = space.free()                                           # positions need not be wrapped
    init, apply = simulate.nve(energy, shift, dt=0.5 * md.FS)
    nbrs = neighbor_fn.allocate(R)                                    # R (natoms, 3) Å
    state = init(key, R, kT=300 * md.KB, mass=md.masses(model.type_map, atype), neighbor=nbrs)
    for _ in range(steps):
        state = apply(state, neighbor=nbrs)
        nbrs = neighbor_fn.update(state.position, nbrs)                # or nbrs.update(state.position)
    assert not nbrs.did_buffer_overflow                                # else: nbrs = neighbor_fn.allocate(...)

or the whole loop: ``md.run_nve(energy, neighbor_fn, R, mass, dt_fs=0.5, steps=1000)``. ``atype`` is type
indices or chemical symbols.

The neighbour list keeps every atom within ``rcut + skin`` (per neighbour type, as many slots as the
data needs); each energy evaluation picks from it, per type, the nearest ``sel[t]`` atoms within ``rcut``
(DeePMD-kit's rule), so energies equal :func:`jaxmd_dp.model.energy.predict` exactly while no atom has
moved more than ``skin / 2`` since the last rebuild (``update`` rebuilds when one has). Positions may
be wrapped into the box by the integrator's shift function or left unwrapped: periodic image jumps are
tracked. ``energy(R)`` without ``neighbor=`` builds a fresh list itself (simpler, slower).

ASE (needs ASE; importing this package does not)::

    atoms.calc = md.DPCalculator(model)            # energy, forces, stress (PBC), energies

Modules: :mod:`~jaxmd_dp.md.units` (KB, FS, masses), :mod:`~jaxmd_dp.md.neighbors` (the MD neighbour
list), :mod:`~jaxmd_dp.md.jax_md` (energy_fn), :mod:`~jaxmd_dp.md.nve` (run_nve), :mod:`~jaxmd_dp.md.ase`
(DPCalculator).
"""

from jaxmd_dp.md.jax_md import energy_fn
from jaxmd_dp.md.neighbors import MDNeighborList, NeighborFn, neighbor_list
from jaxmd_dp.md.nve import NVERun, run_nve
from jaxmd_dp.md.units import FS, KB, masses

__all__ = ["FS", "KB", "masses", "energy_fn", "neighbor_list", "MDNeighborList", "NeighborFn", "run_nve", "NVERun"]


def __getattr__(name):  # the ASE calculator is imported on first use: importing md does not need ASE
    if name == "DPCalculator":
        from jaxmd_dp.md.ase import DPCalculator

        return DPCalculator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
