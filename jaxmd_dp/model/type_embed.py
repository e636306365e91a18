"""DeePMD-kit's type embedding (``TypeEmbedNet``): a learned vector per atom type, as a Flax module.

The table is one linear layer on the one-hot types, T = I·W (+ b), W: (ntypes, tebd_dim), with DeePMD-kit's
residual rule (a skip adds the one-hot row when tebd_dim = ntypes, or twice it when tebd_dim = 2·ntypes), and a
last row of zeros for padding and virtual atoms (type −1, ``padding``).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxmd_dp.model.nets import dense, has_skip, init_moments


def initializer(name: str):
    """A Flax initialiser drawing weight ``name`` as DeePMD-kit does (:func:`~jaxmd_dp.model.nets.init_moments`)."""

    def init(key, shape, dtype=jnp.float64):
        mean, std = init_moments(name, shape)
        return mean + std * jax.random.normal(key, shape, dtype)

    return init


class TypeEmbedding(nn.Module):
    """() → the type table (ntypes + 1, tebd_dim): row t the embedding of type t, the last row zeros.
    Weights ``layer_0``: ``matrix`` (ntypes, tebd_dim) and, with ``bias``, ``bias`` (tebd_dim,)."""

    ntypes: int
    tebd_dim: int
    bias: bool = False
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(self) -> jax.Array:
        onehot = jnp.eye(self.ntypes, dtype=self.dtype)
        layer = _Linear(self.tebd_dim, self.bias, self.dtype, name="layer_0")
        table = layer(onehot)
        if has_skip(self.ntypes, self.tebd_dim):
            table = table + (onehot if self.tebd_dim == self.ntypes else jnp.concatenate([onehot, onehot], axis=-1))
        return jnp.concatenate([table, jnp.zeros((1, self.tebd_dim), self.dtype)], axis=0)


class _Linear(nn.Module):
    """x @ matrix (+ bias)."""

    features: int
    bias: bool
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        matrix = self.param("matrix", initializer("matrix"), (x.shape[-1], self.features), self.dtype)
        y = dense(x, matrix)
        if self.bias:
            y = y + self.param("bias", initializer("bias"), (self.features,), self.dtype)
        return y


def padded_type(atype: jax.Array, ntypes: int) -> jax.Array:
    """Types as rows of the type table: −1 (padding, virtual) → ntypes, the zero row."""
    return jnp.where(atype >= 0, atype, ntypes)
