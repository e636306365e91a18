"""Molecular dynamics with a trained model: a jax-md energy function and an ASE calculator.

jax-md (``pip install 'jaxmd_dp[md]'``), in jax-md's units (metal: Å, eV, amu, so the time unit is
sqrt(amu·Å²/eV) = 10.1805 fs and 1 fs = :data:`FS` = 0.0982269 time units)::

    from jax_md import simulate, space
    from jaxmd_dp import md

    neighbor_fn, energy = md.energy_fn("runs/water", box, atype)      # box (3, 3) Å, rows = cell vectors
    _, shift = space.free()                                           # positions need not be wrapped
    init, apply = simulate.nve(energy, shift, dt=0.5 * md.FS)
    nbrs = neighbor_fn.allocate(R)                                    # R (natoms, 3) Å
    state = init(key, R, kT=300 * md.KB, mass=md.masses(type_map, atype), neighbor=nbrs)
    for _ in range(steps):
        state = apply(state, neighbor=nbrs)
        nbrs = neighbor_fn.update(state.position, nbrs)                # or nbrs.update(state.position)
    assert not nbrs.did_buffer_overflow                                # else: nbrs = neighbor_fn.allocate(...)

The neighbour list keeps every atom within ``rcut + skin`` (per neighbour type, as many slots as the
data needs); each energy evaluation picks from it, per type, the nearest ``sel[t]`` atoms within ``rcut``
(DeePMD-kit's rule), so energies equal :func:`jaxmd_dp.model.energy.predict` exactly while no atom has
moved more than ``skin / 2`` since the last rebuild (``update`` rebuilds when one has). Positions may
be wrapped into the box by the integrator's shift function or left unwrapped: periodic image jumps are
tracked. ``energy(R)`` without ``neighbor=`` builds a fresh list itself (simpler, slower).

ASE::

    atoms.calc = md.DPCalculator("runs/water")      # energy, forces, stress (PBC), energies
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry import neighbor as nblist
from jaxmd_dp.model.energy import ModelHyper, Stats, atomic_energy, type_capacity
from jaxmd_dp.model.evaluate import shared_evaluator
from jaxmd_dp.train.checkpoint import load_trained

# --------------------------------------------------------------------------- units (jax-md's metal units)
#: Boltzmann constant, eV/K (CODATA 2018).
KB = 8.617333262e-5
_AMU_KG, _EV_J, _ANGSTROM_M = 1.66053906660e-27, 1.602176634e-19, 1e-10
#: One femtosecond in the time unit of (amu, Å, eV): 1 fs / sqrt(amu·Å²/eV) = 0.09822694…
#: (jax-md's ``units.metal_unit_system()['time']`` / 1000). A 0.5 fs step is ``dt = 0.5 * FS``.
FS = 1e-15 / math.sqrt(_AMU_KG * _ANGSTROM_M**2 / _EV_J)

# Standard atomic weights (amu) of common elements, used when ASE is not installed.
_MASSES = {"H": 1.008, "He": 4.0026, "Li": 6.94, "Be": 9.0122, "B": 10.81, "C": 12.011, "N": 14.007,
           "O": 15.999, "F": 18.998, "Na": 22.990, "Mg": 24.305, "Al": 26.982, "Si": 28.085, "P": 30.974,
           "S": 32.06, "Cl": 35.45, "K": 39.098, "Ca": 40.078, "Ti": 47.867, "Fe": 55.845, "Ni": 58.693,
           "Cu": 63.546, "Zn": 65.38, "Ag": 107.87, "Au": 196.97}


def masses(type_map, atype) -> np.ndarray:
    """Atomic masses (natoms,) in amu from element symbols (``type_map[atype[i]]``), ASE's table when
    installed (O 15.999, H 1.008)."""
    try:
        from ase.data import atomic_masses, atomic_numbers

        table = lambda s: float(atomic_masses[atomic_numbers[s]])  # noqa: E731
    except ImportError:
        table = _MASSES.__getitem__
    try:
        per_type = np.array([table(s) for s in type_map])
    except KeyError as e:
        raise InputError(f"no atomic mass known for element {e.args[0]!r} (type_map {list(type_map)})") from None
    return per_type[np.asarray(atype)]


# --------------------------------------------------------------------------- models
def resolve_model(model) -> tuple[ModelHyper, Any, Stats]:
    """(hyper, params, stats) from a tuple, an object with ``hyper``/``params``/``stats`` (:class:`jaxmd_dp.api.Model`,
    a :class:`~jaxmd_dp.train.loop.Trainer` exposes ``hyper``/``stats`` and ``state.params``), or a path that
    :func:`jaxmd_dp.train.checkpoint.load_trained` reads (model file or directory, training output or checkpoint)."""
    if isinstance(model, (str, os.PathLike)):
        model = load_trained(model)
    if hasattr(model, "hyper") and hasattr(model, "stats"):
        params = model.params if hasattr(model, "params") else model.state.params
        model = (model.hyper, params, model.stats)
    hyper, params, stats = model
    if not isinstance(hyper, ModelHyper):
        raise TypeError(f"expected (ModelHyper, params, Stats), got {type(hyper).__name__} first")
    params = jax.tree_util.tree_map(jnp.asarray, params)
    return hyper, params, Stats(*(jnp.asarray(s) for s in stats))


# --------------------------------------------------------------------------- neighbour lists for MD
@struct.dataclass
class MDNeighborList:
    """A neighbour list for MD, jax-md style (a pytree; pass it to the energy function as ``neighbor=``).

    idx: (natoms, K) int32, neighbours within ``rcut + skin`` at ``reference_position``, ``K_t`` slots per
      neighbour type (−1 empty); shift: (natoms, K, 3) their periodic images (cell vectors);
    reference_position: (natoms, 3) Å, where the list was built;
    overflow: () bool, True once a rebuild found more neighbours of a type than its slots, or a full cell
      (sticky: check ``did_buffer_overflow`` after a run and re-``allocate``).
    """

    idx: jax.Array
    shift: jax.Array
    reference_position: jax.Array
    overflow: jax.Array
    spec: nblist.NeighborSpec = struct.field(pytree_node=False)
    update_fn: Callable = struct.field(pytree_node=False)

    @property
    def did_buffer_overflow(self) -> bool:
        return self.overflow

    @property
    def max_occupancy(self) -> tuple[int, ...]:
        return self.spec.sel

    def update(self, position: jax.Array, **kwargs) -> "MDNeighborList":
        return self.update_fn(position, self, **kwargs)


class NeighborFn(NamedTuple):
    """jax-md's ``NeighborListFns``: ``allocate(R)`` on the host (fixes shapes), ``update(R, nbrs)``
    jit-safe (rebuilds only when an atom moved more than ``skin / 2``)."""

    allocate: Callable[..., MDNeighborList]
    update: Callable[..., MDNeighborList]


def _image_jumps(R, ref, box_inv):
    """Whole cell vectors each atom jumped since ``ref`` (wrapping by a periodic shift function)."""
    return jax.lax.stop_gradient(jnp.round((R - ref) @ box_inv))


def neighbor_list(hyper: ModelHyper, box, atype, skin: float = 1.0, capacity_factor: float = 1.25,
                  kernels: str | None = None) -> NeighborFn:
    """jax-md style neighbour-list functions for a model's ``rcut``/``sel``.

    Args:
      hyper: the model's hyper-parameters (``rcut``, ``sel``, ``ntypes``).
      box: (3, 3) Å, rows are cell vectors; None without periodic boundaries.
      atype: (natoms,) int type indices.
      skin: Å added to ``rcut`` for the list; 0 rebuilds at every ``update``.
      capacity_factor: head-room on the most neighbours of each type seen at ``allocate``.
      kernels: neighbour-list implementation ("pallas" | "jnp" | "auto"), see :func:`jaxmd_dp.geometry.neighbor.build`.
    """
    box = None if box is None else np.asarray(box, np.float64).reshape(3, 3)
    atype_np = np.asarray(atype, np.int32)
    atype_j = jnp.asarray(atype_np)
    box_j = None if box is None else jnp.asarray(box)
    box_inv = None if box is None else jnp.asarray(np.linalg.inv(box))
    skin = float(skin)
    rlist = hyper.rcut + skin

    def build(spec, R):
        nl = nblist.build(spec, R[None], None if box_j is None else box_j[None], atype_j, kernels)
        over = jnp.any(nl.nneigh[0] > jnp.asarray(spec.sel)) | nl.cell_overflow
        return nl.idx[0], nl.shift[0].astype(R.dtype), over

    build_jit = jax.jit(build, static_argnums=0)

    def update(R, nbrs: MDNeighborList, **unused) -> MDNeighborList:
        R = jnp.asarray(R)
        d = R - nbrs.reference_position
        if box_inv is not None:
            d = d - _image_jumps(R, nbrs.reference_position, box_inv) @ box_j
        moved = jnp.max(jnp.sum(d * d, axis=-1)) > (0.5 * skin) ** 2 if skin > 0 else jnp.asarray(True)

        def rebuild(_):
            idx, shift, over = build(nbrs.spec, R)
            return idx, shift, R, over | nbrs.overflow

        idx, shift, ref, over = jax.lax.cond(
            moved, rebuild, lambda _: (nbrs.idx, nbrs.shift, nbrs.reference_position, nbrs.overflow), None)
        return nbrs.replace(idx=idx, shift=shift, reference_position=ref, overflow=over)

    def allocate(R, extra_capacity: int = 0, **unused) -> MDNeighborList:
        R_np = np.asarray(R, np.float64)
        if R_np.shape != (len(atype_np), 3):
            raise ValueError(f"positions have shape {R_np.shape}, expected ({len(atype_np)}, 3)")
        frames = R_np[None]
        spec = nblist.allocate(frames, None if box is None else box[None], rlist, hyper.sel,
                               capacity_factor=max(1.3, capacity_factor))
        # count the neighbours of each type within rcut + skin, then size the slots with head-room
        nl = nblist.build(spec, frames, None if box is None else box[None], atype_np, kernels)
        nmax = np.asarray(nl.nneigh).max(axis=(0, 1))
        sel = tuple(max(1, int(math.ceil(n * capacity_factor)) + int(extra_capacity)) for n in nmax)
        spec = spec._replace(sel=sel)
        Rj = jnp.asarray(R)
        idx, shift, over = build_jit(spec, Rj)
        return MDNeighborList(idx, shift, Rj, over, spec, update)

    return NeighborFn(allocate, update)


def _select_within_rcut(hyper: ModelHyper, ext_sel, R, box, box_inv, nbrs: MDNeighborList):
    """From the extended list, the nearest ``sel[t]`` neighbours of each type within ``rcut`` now:
    (idx (1, natoms, nnei), shift (1, natoms, nnei, 3)) as :func:`jaxmd_dp.geometry.neighbor.build` would give."""
    R = jax.lax.stop_gradient(R)
    idx, shift = nbrs.idx, nbrs.shift
    if box is not None:  # image jumps since the list was built: shift_ij + n_i − n_j
        n = _image_jumps(R, nbrs.reference_position, box_inv)
        j = jnp.maximum(idx, 0)
        shift = shift + n[:, None, :] - n[j]
    j = jnp.maximum(idx, 0)
    d = R[j] - R[:, None, :]
    if box is not None:
        d = d + shift @ box
    r2 = jnp.sum(d * d, axis=-1)
    ok = (idx >= 0) & (r2 < hyper.rcut**2)
    out_idx, out_shift, start = [], [], 0
    for nsel, k in zip(hyper.sel, ext_sel):
        sl = slice(start, start + k)
        start += k
        key = jnp.where(ok[:, sl], r2[:, sl], jnp.inf)
        kk = min(nsel, k)
        neg, pos = jax.lax.top_k(-key, kk)
        found = jnp.isfinite(neg)
        it = jnp.where(found, jnp.take_along_axis(idx[:, sl], pos, axis=-1), -1)
        st = jnp.where(found[..., None], jnp.take_along_axis(shift[:, sl], pos[..., None], axis=-2), 0.0)
        if kk < nsel:
            it = jnp.pad(it, ((0, 0), (0, nsel - kk)), constant_values=-1)
            st = jnp.pad(st, ((0, 0), (0, nsel - kk), (0, 0)))
        out_idx.append(it)
        out_shift.append(st)
    return jnp.concatenate(out_idx, axis=-1)[None], jnp.concatenate(out_shift, axis=-2)[None]


class _NL(NamedTuple):
    idx: jax.Array
    shift: jax.Array


def energy_fn(model, box, atype, *, skin: float = 1.0, capacity_factor: float = 1.25,
              kernels: str | None = None) -> tuple[NeighborFn, Callable[..., jax.Array]]:
    """A jax-md energy function for a trained model, with its neighbour-list functions.

    Like jax-md's ``energy.*_neighbor_list`` constructors this returns ``(neighbor_fn, energy)``:
    ``energy(R, neighbor=None, **kwargs)`` maps positions R (natoms, 3) Å to the total energy (eV), a
    scalar differentiable in R (forces ``-jax.grad(energy)``; use with ``jax_md.simulate.nve``,
    ``nvt_nose_hoover``, ``nvt_langevin``, ``jax_md.minimize.fire_descent`` ...). With
    ``neighbor=neighbor_fn.allocate(R)`` (kept current with ``neighbor_fn.update``) the list is reused;
    without it every call builds an exact list (O(N²), fine for small systems).

    Args:
      model: (hyper, params, stats), a :class:`jaxmd_dp.api.Model`, a Trainer, or a model path.
      box: (3, 3) Å (rows = cell vectors; a length-3 array is an orthorhombic box), or None without PBC.
      atype: (natoms,) int type indices into the model's ``type_map``.
      skin, capacity_factor: see :func:`neighbor_list`.
      kernels: "pallas" | "jnp" | "auto" for the environment matrix and neighbour list.
    Extra keyword arguments of ``energy`` (``kT``, ``box``... passed by jax-md integrators) are ignored:
    the box is fixed.
    """
    hyper, params, stats = resolve_model(model)
    if box is not None:
        box = np.asarray(box, np.float64)
        box = np.diag(box) if box.shape == (3,) else box.reshape(3, 3)
    atype_np = np.asarray(atype, np.int32).reshape(-1)
    if atype_np.min(initial=0) < 0 or atype_np.max(initial=0) >= hyper.ntypes:
        raise InputError(f"atom types must lie in 0..{hyper.ntypes - 1} (type_map {list(hyper.type_map)})")
    capacity = type_capacity([atype_np], hyper.ntypes)
    nfn = neighbor_list(hyper, box, atype_np, skin, capacity_factor, kernels)
    atype_j = jnp.asarray(atype_np)
    box_j = None if box is None else jnp.asarray(box)
    box_inv = None if box is None else jnp.asarray(np.linalg.inv(box))
    exact_spec = nblist.allocate(np.zeros((1, len(atype_np), 3)), None if box is None else box[None],
                                   hyper.rcut, hyper.sel, method="brute")

    def energy(R: jax.Array, neighbor: MDNeighborList | None = None, **unused) -> jax.Array:
        R = jnp.asarray(R)
        b = None if box_j is None else box_j[None].astype(R.dtype)
        if neighbor is None:
            nl = nblist.build(exact_spec, R[None], b, atype_j, kernels)
        else:
            nl = _NL(*_select_within_rcut(hyper, neighbor.spec.sel, R, None if box_j is None else box_j.astype(R.dtype),
                                          box_inv, neighbor))
        return jnp.sum(atomic_energy(hyper, params, stats, R[None], b, atype_j, nl, capacity, kernels))

    return nfn, energy


# --------------------------------------------------------------------------- a ready-made NVE run
class NVERun(NamedTuple):
    """Energies every ``record_every`` steps (step 0 first): time (fs), potential, kinetic and total energy
    (eV), temperature (K, 3N degrees of freedom, jax-md's); the final jax-md state and neighbour list."""

    time_fs: np.ndarray
    potential: np.ndarray
    kinetic: np.ndarray
    total: np.ndarray
    temperature: np.ndarray
    state: Any
    neighbors: MDNeighborList

    def drift_per_atom(self) -> dict:
        """Energy conservation, eV/atom: ``max_dev`` = max |E(t) − E(0)|, ``end`` = E(end) − E(0),
        ``slope_per_ps`` = least-squares slope of E(t) (eV/atom/ps)."""
        n = self.state.position.shape[0]
        dev = (self.total - self.total[0]) / n
        slope = np.polyfit(self.time_fs * 1e-3, self.total / n, 1)[0] if len(self.total) > 1 else 0.0
        return {"max_dev": float(np.max(np.abs(dev))), "end": float(dev[-1]), "slope_per_ps": float(slope)}


def run_nve(energy: Callable, neighbor_fn: NeighborFn, R, mass, *, dt_fs: float = 0.5, steps: int = 1000,
            temperature_K: float | None = 300.0, momenta=None, seed: int = 0, record_every: int = 10,
            shift_fn: Callable | None = None) -> NVERun:
    """Velocity-Verlet NVE with ``jax_md.simulate.nve`` (needs jax-md), jitted ``record_every`` steps at a
    time; the neighbour list is updated after every step and re-allocated (the chunk re-run) if it overflows.

    R: (natoms, 3) Å; mass: (natoms,) amu; dt_fs: time step, fs; temperature_K: Maxwell-Boltzmann momenta
    (centre-of-mass momentum removed, jax-md's ``initialize_momenta``, drawn with ``seed``) unless
    ``momenta`` (amu·Å/time unit) are given; shift_fn: jax-md shift (default ``space.free()``'s, positions
    unwrapped; ``space.periodic(L)``'s wrapping works too).
    """
    from jax_md import quantity, simulate, space

    if steps % record_every:
        raise ValueError(f"steps ({steps}) must be a multiple of record_every ({record_every})")
    shift = shift_fn or space.free()[1]
    init, apply = simulate.nve(energy, shift, dt_fs * FS)
    R = jnp.asarray(R)
    mass = jnp.asarray(mass, R.dtype)
    nbrs = neighbor_fn.allocate(R)
    kT = KB * (temperature_K or 0.0)
    state = init(jax.random.PRNGKey(seed), R, kT, mass=mass, momenta=momenta, neighbor=nbrs)

    @jax.jit
    def chunk(state, nbrs, nsteps):  # nsteps is traced: one compilation serves 0 (measure only) and record_every
        def body(_, c):
            s, nb = c
            s = apply(s, neighbor=nb)
            return s, neighbor_fn.update(s.position, nb)

        state, nbrs = jax.lax.fori_loop(0, nsteps, body, (state, nbrs))
        ke = quantity.kinetic_energy(momentum=state.momentum, mass=state.mass)
        t = quantity.temperature(momentum=state.momentum, mass=state.mass) / KB
        return state, nbrs, (energy(state.position, neighbor=nbrs), ke, t)

    rows = [chunk(state, nbrs, 0)[2]]
    done = 0
    while done < steps:
        new_state, new_nbrs, m = chunk(state, nbrs, record_every)
        if bool(new_nbrs.did_buffer_overflow):  # more neighbours than slots: re-allocate, redo the chunk
            nbrs = neighbor_fn.allocate(state.position)
            continue
        state, nbrs = new_state, new_nbrs
        rows.append(m)
        done += record_every
    pe, ke, t = (np.array([float(r[i]) for r in rows]) for i in range(3))
    time_fs = np.arange(len(rows)) * record_every * dt_fs
    return NVERun(time_fs, pe, ke, pe + ke, t, state, nbrs)


# --------------------------------------------------------------------------- ASE
def _ase_calculator_base():
    try:
        from ase.calculators.calculator import Calculator, all_changes
    except ImportError:
        raise ImportError("DPCalculator needs ASE: pip install 'jaxmd_dp[md]' (or pip install ase)") from None
    return Calculator, all_changes


@functools.lru_cache(maxsize=1)
def _calculator_class():
    Calculator, all_changes = _ase_calculator_base()
    from ase.calculators.calculator import PropertyNotImplementedError
    from ase.stress import full_3x3_to_voigt_6_stress

    class DPCalculator(Calculator):
        """ASE calculator for a trained model: ``energy`` / ``free_energy`` (eV), ``forces`` (eV/Å),
        ``energies`` (per atom, eV) and, for periodic atoms, ``stress`` = −virial/volume (eV/Å³, ASE's Voigt
        order xx, yy, zz, yz, xz, xy).

        model: (hyper, params, stats), a :class:`jaxmd_dp.api.Model`, a Trainer or a model path. Chemical
        symbols map to types through the model's ``type_map``. Atoms must be periodic in all three
        directions or in none.
        """

        implemented_properties = ["energy", "free_energy", "forces", "stress", "energies"]

        def __init__(self, model, **kwargs):
            super().__init__(**kwargs)
            self.hyper, self.params, self.stats = resolve_model(model)
            self.type_map = list(self.hyper.type_map)

        def atom_types(self, atoms) -> np.ndarray:
            index = {s: i for i, s in enumerate(self.type_map)}
            symbols = atoms.get_chemical_symbols()
            missing = sorted(set(symbols) - set(index))
            if missing:
                raise InputError(f"elements {missing} are not in the model's type_map {self.type_map}")
            return np.array([index[s] for s in symbols], np.int32)

        def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
            super().calculate(atoms, properties, system_changes)
            atoms = self.atoms
            pbc = np.asarray(atoms.pbc, bool)
            if pbc.any() and not pbc.all():
                raise PropertyNotImplementedError(f"DPCalculator: pbc={pbc.tolist()}; periodic in all three "
                                                  "directions or in none")
            box = atoms.cell.array[None].astype(np.float64) if pbc.all() else None
            ev = shared_evaluator(self.hyper, self.params, self.stats)
            pred = ev(atoms.get_positions()[None], box, self.atom_types(atoms))
            e = float(pred.energy[0])
            self.results = {"energy": e, "free_energy": e, "forces": np.array(pred.force[0]),
                            "energies": np.array(pred.atom_energy[0])}
            if box is not None:
                virial = np.asarray(pred.virial[0]).reshape(3, 3)
                self.results["stress"] = full_3x3_to_voigt_6_stress(-virial / atoms.get_volume())

    return DPCalculator


def __getattr__(name):  # DPCalculator is built on first use, so that importing md does not need ASE
    if name == "DPCalculator":
        return _calculator_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
