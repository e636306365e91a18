"""Energy fitting: one fitting net per centre type, descriptor → atomic energy (eV)."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxmd_dp.model.nets import FittingNet


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
    def __call__(self, D: jax.Array, atype: jax.Array) -> jax.Array:
        out = jnp.zeros(D.shape[:-1], self.dtype)
        for t in range(self.ntypes):
            e = FittingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name=f"fit_{t}")(D)[..., 0]
            out = jnp.where(atype == t, e, out)
        return out
