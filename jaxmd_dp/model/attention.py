"""DPA-1's gated self-attention over an atom's neighbour slots (DeePMD-kit's ``NeighborGatedAttention``).

Each layer maps the slots' embeddings G (..., nnei, M) to LayerNorm(G + A(G)), with one head of width d = attn:

    q, k, v = split(G W_in + b_in)            (each normalised to unit length with ``normalize``)
    L_ij = α q_i·k_j                           α = temperature, or (d · scaling_factor)^-1/2
    smooth:  L_ij = (L_ij + 20) s_i s_j − 20     s the switch w(r) of each slot (0 in empty slots)
    else:    L_ij = −∞ where slot j is empty
    P = softmax_j(L); P_ij = 0 where slot i is empty; smooth: P_ij ·= s_i s_j; dotr: P_ij ·= r̂_i·r̂_j
    A(G) = (P v) W_out + b_out

r̂ the slots' unit directions (0 in empty slots). With smoothing the empty keys stay in the softmax's sum
(logit −20 each), as DeePMD-kit computes it. An empty slot's query row is 0, so its embedding leaves a layer as
LayerNorm(G + b_out): the layer takes such rows apart (``empty``, for slots cut from the list, counted in the
softmax's sums by ``extra``). Weights per layer l: ``attention_{l}`` with ``in_proj``, ``out_proj`` (``matrix``,
``bias``) and, with ``trainable_ln``, ``layer_norm`` (``scale``, ``offset``).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxmd_dp.model.nets import PRECISION, dense
from jaxmd_dp.model.type_embed import initializer

SHIFT = 20.0  # DeePMD-kit's attnw_shift: the logit of a slot whose switch is 0, with smoothing


def unit_rows(x: jax.Array, floor: float = 0.0) -> jax.Array:
    """x / max(|x|, floor) along the last axis, with a zero vector (and a zero gradient) where |x| = 0."""
    n2 = jnp.sum(x * x, axis=-1, keepdims=True)
    nonzero = n2 > 0.0
    norm = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, n2, 1.0)), 0.0)
    return x / jnp.maximum(norm, floor) if floor > 0.0 else x / jnp.where(nonzero, norm, 1.0)


def layer_norm(x: jax.Array, eps: float) -> jax.Array:
    """(x − mean) / sqrt(var + eps) over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps)


def softmax_of_real(logits: jax.Array, real: jax.Array | None, extra: int = 0) -> jax.Array:
    """softmax over the last axis; with ``real`` (broadcast to logits), keys that are not real weigh 0 (their
    logit −∞), a row of no real key is 0 (no NaN, in values or gradients). Without ``real``, ``extra`` more keys
    of logit −SHIFT each are in the sum (empty slots cut from the list, see :class:`GatedAttentionLayer`)."""
    if real is None:
        m = jnp.max(logits, axis=-1, keepdims=True)
        m = jax.lax.stop_gradient(jnp.maximum(m, -SHIFT) if extra else m)
        e = jnp.exp(logits - m)
        s = jnp.sum(e, axis=-1, keepdims=True)
        return e / (s + extra * jnp.exp(-SHIFT - m) if extra else s)
    m = jax.lax.stop_gradient(jnp.max(jnp.where(real, logits, -jnp.inf), axis=-1, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.where(real, jnp.exp(jnp.where(real, logits, m) - m), 0.0)
    s = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(s > 0.0, s, 1.0)


class GatedAttentionLayer(nn.Module):
    """One layer: G (..., nnei, M) → LayerNorm(G + A(G)) (see the module doc)."""

    hidden: int
    scaling: float
    normalize: bool = True
    smooth: bool = True
    dotr: bool = True
    trainable_ln: bool = True
    ln_eps: float = 1e-5
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(
        self,
        g: jax.Array,
        real: jax.Array,
        switch: jax.Array,
        direction: jax.Array,
        empty: jax.Array | None = None,
        extra: int = 0,
    ):
        """g: (..., nnei, M); real: (..., nnei) bool; switch: (..., nnei) w(r); direction: (..., nnei, 3) r̂.
        With ``empty`` (..., M), embeddings of empty slots kept apart, returns (g, the empty rows after the
        layer); ``extra``: empty slots not in g, in each row's softmax sum (with smoothing)."""
        d, m = self.hidden, g.shape[-1]
        w_in, b_in = _Weights(m, 3 * d, self.dtype, name="in_proj")()
        # q, k, v each its own product (the columns of in_proj): their cotangents then need no assembly
        q, k, v = (dense(g, w_in[:, i * d : (i + 1) * d]) + b_in[i * d : (i + 1) * d] for i in range(3))
        if self.normalize:
            q, k, v = unit_rows(q), unit_rows(k), unit_rows(v)
        q = q * self.scaling
        logits = jnp.einsum("...id,...jd->...ij", q, k, precision=PRECISION)
        if self.smooth:  # an empty slot's switch is 0: its row and column of the weights are 0
            pair = switch[..., :, None] * switch[..., None, :]
            weights = softmax_of_real((logits + SHIFT) * pair - SHIFT, None, extra) * pair
        else:
            weights = softmax_of_real(logits, real[..., None, :])
            weights = jnp.where(real[..., :, None], weights, 0.0)
        if self.dotr:  # r̂_i · r̂_j as three element-wise products (a dot of inner size 3 runs slowly)
            weights = weights * sum(direction[..., :, None, c] * direction[..., None, :, c] for c in range(3))
        w_out, b_out = _Weights(d, m, self.dtype, name="out_proj")()
        if m < d:  # (P v) W_out as P (v W_out): the slots × slots product on the narrower side
            out = jnp.einsum("...ij,...jm->...im", weights, dense(v, w_out), precision=PRECISION)
        else:
            out = dense(jnp.einsum("...ij,...jd->...id", weights, v, precision=PRECISION), w_out)
        norm = _ScaleShift(self.dtype, name="layer_norm") if self.trainable_ln else (lambda x: x)
        x = norm(layer_norm(g + out + b_out, self.ln_eps))
        if empty is None:
            return x
        return x, norm(layer_norm(empty + b_out, self.ln_eps))  # an empty slot's P row is 0


class _Weights(nn.Module):
    """A linear layer's weights, ``matrix`` (n_in, n_out) and ``bias`` (n_out,), drawn as DeePMD-kit draws them."""

    n_in: int
    n_out: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self) -> tuple[jax.Array, jax.Array]:
        return (
            self.param("matrix", initializer("matrix"), (self.n_in, self.n_out), self.dtype),
            self.param("bias", initializer("bias"), (self.n_out,), self.dtype),
        )


class _ScaleShift(nn.Module):
    """x · scale + offset, one of each per feature (a layer norm's trained part)."""

    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n = x.shape[-1]
        return x * self.param("scale", initializer("scale"), (n,), self.dtype) + self.param(
            "offset", initializer("offset"), (n,), self.dtype
        )
