"""An embedding net's value G(s) and slope G′(s) = dG/ds in one pass, with a written-out weight VJP.

The training step needs the forces −∂E/∂r and the weight gradient of a loss on them. Differentiated twice
by autodiff, the embedding net's part is a reverse pass through the net (for ∂E/∂s) and a reverse pass
over that reverse pass (for the weights), whose transposed products XLA CPU fused with their cotangents'
producers, gathers included, into strided transposes, each far slower than the products it serves.

Here the slope is carried forward beside the value instead (forward mode: one product more per layer, as
many as the reverse pass it replaces), and the descriptor uses G with G′ as its derivative in s
(:func:`with_slope`, a ``custom_jvp`` with the tangent Ġ + G′·ṡ), so ∂E/∂s_p = Σ_m ∂E/∂G_pm · G′_pm is a
row-wise product, and the coordinates' reverse pass does not enter the net. The weights then see the net
once, through (G, G′), and for tanh nets that first-order VJP is written out (:func:`value_and_slope`;
:func:`net_value_and_slope` picks it for an :class:`~jaxmd_dp.model.nets.EmbeddingNet`): per layer two
products for the weight gradient and two to the layer below, and one element-wise pass each way.

Layer k (DeePMD's rule, :class:`~jaxmd_dp.model.nets.Layer`): z = x·W + b, y = idt ⊙ tanh(z) + skip(x);
its slope y′ = idt ⊙ (1 − tanh²z) ⊙ (x′·W) + skip(x′), with x′ = 1 at the input s. Second derivatives in s
are not kept (G′ is taken as a constant of s): the training step differentiates the coordinates once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxmd_dp.model.nets import PRECISION, EmbeddingNet, has_skip


def _mm(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.matmul(a, b, precision=PRECISION)


def _twice(v: jax.Array, n_out: int) -> jax.Array:
    """The skip of a layer with n_out outputs: v, or [v, v] when n_out is twice v's width."""
    return v if v.shape[-1] == n_out else jnp.concatenate([v, v], axis=-1)


def _fold(v: jax.Array, n_in: int) -> jax.Array:
    """The skip's transpose: v (rows, n_out) → (rows, n_in), summing the two halves when n_out = 2·n_in."""
    return v if v.shape[-1] == n_in else v[:, :n_in] + v[:, n_in:]


def _forward(layers, s):
    """(G, G′) and the residuals of each layer: (x, x′, t, u), x′ None at the input (x′ = 1)."""
    x, xp, res = s, None, []
    for p in layers:
        w, b = p["matrix"], p["bias"]
        n_in, n_out = w.shape
        t = jnp.tanh(_mm(x, w) + b)
        u = w[0] if xp is None else _mm(xp, w)  # x′·W, with x′ = 1 (1 wide) at the input
        y, yp = t, (1 - t * t) * u
        if "idt" in p:
            y, yp = y * p["idt"], yp * p["idt"]
        if has_skip(n_in, n_out):
            y = y + _twice(x, n_out)
            yp = yp + (jnp.ones_like(y) if xp is None else _twice(xp, n_out))
        res.append((x, xp, t, u))
        x, xp = y, yp
    return (x, xp), res


@jax.custom_vjp
def value_and_slope(layers: list, s: jax.Array) -> tuple[jax.Array, jax.Array]:
    """G(s) and G′(s) of a tanh embedding net. layers: the net's weights, one dict per layer (``matrix``
    (in, out), ``bias`` (out,), ``idt`` (out,) with resnet_dt); s: (rows, 1) → two (rows, M1).
    Reverse mode in ``layers`` only: the cotangent of s is 0 (see :func:`with_slope`)."""
    return _forward(layers, s)[0]


def _value_and_slope_fwd(layers, s):
    out, res = _forward(layers, s)
    return out, (layers, res)


def _value_and_slope_bwd(saved, cts):
    layers, res = saved
    gy, gyp = cts  # cotangents of the layer's outputs y and y′
    grads = []
    for p, (x, xp, t, u) in zip(reversed(layers), reversed(res)):
        w = p["matrix"]
        n_in, n_out = w.shape
        d = 1 - t * t
        g = {}
        if "idt" in p:
            g["idt"] = jnp.sum(gy * t + gyp * d * u, axis=0)
            a, ap = gy * p["idt"], gyp * p["idt"]
        else:
            a, ap = gy, gyp
        gu = d * ap  # cotangent of u = x′·W
        gz = d * (a - 2 * t * u * ap)  # of z = x·W + b: tanh′ = 1 − t², tanh″ = −2t(1 − t²)
        g["bias"] = jnp.sum(gz, axis=0)
        if xp is None:  # the input: x = s, x′ = 1
            g["matrix"] = _mm(x.T, gz) + jnp.sum(gu, axis=0, keepdims=True)
        else:
            g["matrix"] = _mm(x.T, gz) + _mm(xp.T, gu)
            skip = has_skip(n_in, n_out)
            gy = _mm(gz, w.T) + (_fold(gy, n_in) if skip else 0)
            gyp = _mm(gu, w.T) + (_fold(gyp, n_in) if skip else 0)
        grads.append(g)
    return grads[::-1], jnp.zeros_like(res[0][0])  # s (the first layer's x) gets none: see with_slope


value_and_slope.defvjp(_value_and_slope_fwd, _value_and_slope_bwd)


def net_value_and_slope(net: EmbeddingNet, s: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(G(s), G′(s)) of an embedding net (bound, e.g. a submodule inside a ``compact`` method) for s (rows, 1):
    with tanh, :func:`value_and_slope` on the net's weights; otherwise, or while the net is initialised, the
    net in forward mode (autodiff of its layers)."""
    params = net.variables.get("params")
    if net.activation != "tanh" or not params:
        return net(s, jnp.ones_like(s))
    layers = [dict(params[f"layer_{k}"]) for k in range(len(net.neuron))]
    return value_and_slope(layers, s.astype(net.dtype))


@jax.custom_jvp
def with_slope(G: jax.Array, dG: jax.Array, s: jax.Array) -> jax.Array:
    """G, with G′ as its derivative in s: the value is G and the tangent Ġ + G′·ṡ (as G + G′·(s − s̄) with
    s̄ = s held constant would give, without computing that zero product: G′ is not read for the value, and
    the weight gradient gets no cotangent for G′ multiplied by s − s̄ = 0, which is less memory traffic in the
    training step). G, dG: (..., M1); s: (..., 1), the net's input with its derivatives."""
    return G


@with_slope.defjvp
def _with_slope_jvp(primals, tangents):
    G, dG, _ = primals
    tG, _, ts = tangents  # G′'s own tangent multiplies s − s̄ = 0
    return G, tG + dG * ts.astype(G.dtype)
