"""A jax-md energy function for a trained model (see :mod:`jaxmd_dp.md` for a full NVE loop)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.api import as_model
from jaxmd_dp.geometry import neighbor as nblist
from jaxmd_dp.md.neighbors import MDNeighborList, NeighborFn, neighbor_list, select_within_rcut
from jaxmd_dp.model.energy import atomic_energy, type_capacity
from jaxmd_dp.model.plan import ExecutionPlan


def energy_fn(
    model, box, atype, *, skin: float = 1.0, capacity_factor: float = 1.25, kernels: str | None = None
) -> tuple[NeighborFn, Callable[..., jax.Array]]:
    """A jax-md energy function for a trained model, with its neighbour-list functions.

    Like jax-md's ``energy.*_neighbor_list`` constructors this returns ``(neighbor_fn, energy)``:
    ``energy(R, neighbor=None, **kwargs)`` maps positions R (natoms, 3) Å to the total energy (eV), a
    scalar differentiable in R (forces ``-jax.grad(energy)``; use with ``jax_md.simulate.nve``,
    ``nvt_nose_hoover``, ``nvt_langevin``, ``jax_md.minimize.fire_descent`` ...). With
    ``neighbor=neighbor_fn.allocate(R)`` (kept current with ``neighbor_fn.update``) the list is reused;
    without it every call builds an exact list (O(N²), fine for small systems).

    This is not the :class:`~jaxmd_dp.model.evaluate.Evaluator` (the prediction path of ``test``,
    ``Model.predict``, the ASE calculator): jax-md needs a traceable energy that its integrators
    differentiate and call inside their own jitted loop, with a neighbour list that is a pytree updated in
    that loop, while the Evaluator is a host function (numpy in and out) that builds its lists afresh and
    returns forces and virials. Both compute the energy with the same model function,
    :func:`jaxmd_dp.model.energy.atomic_energy`, on the same neighbours (DeePMD-kit's: the nearest
    ``sel[t]`` of each type within rcut), so their energies and forces agree.

    Args:
      model: a :class:`jaxmd_dp.api.Model`, a model path, a Trainer, or (hyper, params, stats)
        (:func:`jaxmd_dp.api.as_model`).
      box: (3, 3) Å (rows = cell vectors; a length-3 array is an orthorhombic box), or None without PBC.
      atype: (natoms,) type indices into the model's ``type_map``, or chemical symbols.
      skin, capacity_factor: see :func:`jaxmd_dp.md.neighbors.neighbor_list`.
      kernels: "pallas" | "jnp" | "auto" for the environment matrix and neighbour list.
    Extra keyword arguments of ``energy`` (``kT``, ``box``... passed by jax-md integrators) are ignored:
    the box is fixed.
    """
    model = as_model(model)
    hyper, params, stats = model.hyper, model.params, model.stats
    if box is not None:
        box = np.asarray(box, np.float64)
        box = np.diag(box) if box.shape == (3,) else box.reshape(3, 3)
    atype_np = model.atom_types(atype)
    capacity = type_capacity([atype_np], hyper.ntypes)
    nfn = neighbor_list(hyper, box, atype_np, skin, capacity_factor, kernels)
    atype_j = jnp.asarray(atype_np)
    box_j = None if box is None else jnp.asarray(box)
    box_inv = None if box is None else jnp.asarray(np.linalg.inv(box))
    exact_spec = nblist.allocate(
        np.zeros((1, len(atype_np), 3)), None if box is None else box[None], hyper.rcut, hyper.sel, method="brute"
    )

    def energy(R: jax.Array, neighbor: MDNeighborList | None = None, **unused) -> jax.Array:
        R = jnp.asarray(R)
        b = None if box_j is None else box_j[None].astype(R.dtype)
        if neighbor is None:
            nl = nblist.build(exact_spec, R[None], b, atype_j, kernels)
        else:
            nl = select_within_rcut(
                hyper, neighbor.spec.sel, R, None if box_j is None else box_j.astype(R.dtype), box_inv, neighbor
            )
        return jnp.sum(
            atomic_energy(hyper, params, stats, R[None], b, atype_j, nl, plan=ExecutionPlan(capacity, kernels))
        )

    return nfn, energy
