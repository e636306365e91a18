"""A ready-made NVE run with jax-md (velocity Verlet), recording the energies on the way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.md.neighbors import MDNeighborList, NeighborFn
from jaxmd_dp.md.units import FS, KB


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


def run_nve(
    energy: Callable,
    neighbor_fn: NeighborFn,
    R,
    mass,
    *,
    dt_fs: float = 0.5,
    steps: int = 1000,
    temperature_K: float | None = 300.0,
    momenta=None,
    seed: int = 0,
    record_every: int = 10,
    shift_fn: Callable | None = None,
) -> NVERun:
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
