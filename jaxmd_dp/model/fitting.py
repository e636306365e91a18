"""Energy fitting: one fitting net per centre type, descriptor → atomic energy (eV)."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxmd_dp.model.nets import FittingNet
from jaxmd_dp.model.type_groups import default_capacity, gather_type, put_atoms, take_atoms, take_atoms_rev


class EnergyFitting(nn.Module):
    """D: (nframes, natoms, dim), atype: (nframes, natoms) → E_i: (nframes, natoms) eV (no bias).

    Padding atoms (atype −1) get 0.
    """

    ntypes: int
    neuron: Sequence[int] = (240, 240, 240)
    resnet_dt: bool = True
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(self, D: jax.Array, atype: jax.Array, capacity: tuple[int, ...] | None = None,
                 reverse_only: bool = False) -> jax.Array:
        """capacity: most atoms of each type per frame (static; default natoms): each net runs on its
        type's atoms only (see :mod:`jaxmd_dp.model.type_groups`). reverse_only: the training step's path,
        differentiated in reverse mode only: the type blocks' gathers then have gathers as their VJP
        (:func:`~jaxmd_dp.model.type_groups.take_atoms_rev`); forward mode (``jax.jvp``, Hessians) needs False."""
        capacity = capacity or default_capacity(self.ntypes, D.shape[1])
        out = jnp.zeros(D.shape[:-1], self.dtype)
        for t in range(self.ntypes):
            order, valid = gather_type(atype, t, max(1, capacity[t]))
            net = FittingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name=f"fit_{t}")
            block = take_atoms_rev(D, atype, t, order, valid) if reverse_only else take_atoms(D, order)
            out = put_atoms(out, order, valid, net(block)[..., 0])
        return out
