"""DeePMD's fully connected nets as Flax modules, with its residual and timestep (``idt``) rules.

A layer computes y = act(x @ matrix + bias); with ``resnet_dt`` a learned per-unit timestep ``idt``
multiplies y when the layer can have a skip; the skip adds x when out = in, or [x, x] when out = 2·in
(DeePMD-kit's ``MLPLayer``). Embedding layers and fitting hidden layers have skips; the last fitting
layer is linear. Initialisation follows DeePMD-kit: matrix ~ N(0, 1/(in + out)), bias ~ N(0, 1),
idt ~ N(0.1, 0.001²).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "gelu": partial(jax.nn.gelu, approximate=True),  # DeePMD-kit's gelu is the tanh approximation
    "gelu_tf": partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "softplus": jax.nn.softplus,
    "sigmoid": jax.nn.sigmoid,
    "linear": lambda x: x,
    "none": lambda x: x,
}


def init_moments(name: str, shape: tuple[int, ...]) -> tuple[float, float]:
    """(mean, standard deviation) of the normal distribution DeePMD-kit draws weight ``name`` of this
    shape from: matrix (in, out) ~ N(0, 1/(in + out)), bias ~ N(0, 1), idt ~ N(0.1, 0.001²); a layer norm's
    scale 1 and offset 0. The single rule for both the Flax initialisers here and
    :func:`jaxmd_dp.model.energy.init_params`."""
    if name == "matrix":
        return 0.0, (shape[0] + shape[1]) ** -0.5
    return {"bias": (0.0, 1.0), "idt": (0.1, 0.001), "scale": (1.0, 0.0), "offset": (0.0, 0.0)}[name]


def _normal(name: str):
    def init(key, shape, dtype=jnp.float64):
        mean, std = init_moments(name, shape)
        return mean + std * jax.random.normal(key, shape, dtype)

    return init


# Every matmul of the nets and descriptor at the operands' full precision. On a GPU, XLA's default for
# float32 is TF32 (10-bit mantissa): the float32 fixture models then miss DeePMD-kit's predictions by more
# than the 1e-5 bound. On the CPU the setting changes nothing. On a GPU, XLA's autotuning of these full-precision
# GEMMs lengthens the float32 compile, so the steps are compiled without it (jaxmd_dp/runtime/compile_options.py).
PRECISION = jax.lax.Precision.HIGHEST


# x @ w whose derivative keeps x behind an optimisation barrier. The weight gradient Σ_rows xᵀ g needs x
# transposed; left to itself, XLA CPU fuses the element-wise producers of x (the backward pass's products
# and sums) into that transpose, a strided loop far slower than the products and a plain transpose
# apart (on the embedding nets' (pairs, width) float32 rows). The tangent
# dx·w + barrier(x)·dw transposes to barrier(x)ᵀ·g, so x is materialised before it is transposed. Being a
# custom_jvp, it has derivatives of any order in forward and reverse mode (jax.jvp, jax.hessian, ...).
@jax.custom_jvp
def dense(x: jax.Array, w: jax.Array) -> jax.Array:
    """x: (..., in), w: (in, out) → x @ w: (..., out)."""
    return jnp.matmul(x, w, precision=PRECISION)


def _dense_jvp(primals, tangents):
    x, w = primals
    dx, dw = tangents
    # JAX calls this rule only when dx or dw is not a symbolic zero, so dy is always set
    dy = None if isinstance(dx, SymbolicZero) else dense(dx, w)
    if not isinstance(dw, SymbolicZero):  # a weight tangent: the weight gradient's side
        dy_w = jnp.matmul(jax.lax.optimization_barrier(x), dw, precision=PRECISION)
        dy = dy_w if dy is None else dy + dy_w
    return dense(x, w), dy


dense.defjvp(_dense_jvp, symbolic_zeros=True)


def has_skip(n_in: int, n_out: int) -> bool:
    """DeePMD-kit's residual rule: a skip (and, with resnet_dt, an idt) only when out = in or 2·in."""
    return n_out == n_in or n_out == 2 * n_in


class Layer(nn.Module):
    """One DeePMD layer. x: (..., in) → (..., out)."""

    features: int
    activation: str = "tanh"
    resnet: bool = True
    resnet_dt: bool = False
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(self, x: jax.Array, dx: jax.Array | None = None):
        """x: (..., in) → y: (..., out); with a tangent dx (..., in) also dy = ∂y/∂x · dx → (y, dy)."""
        n_in = x.shape[-1]
        matrix = self.param("matrix", _normal("matrix"), (n_in, self.features), self.dtype)
        bias = self.param("bias", _normal("bias"), (self.features,), self.dtype)
        act = ACTIVATIONS[self.activation]
        z = dense(x, matrix) + bias
        y, dy = (act(z), None) if dx is None else jax.jvp(act, (z,), (dense(dx, matrix),))
        skip = self.resnet and has_skip(n_in, self.features)
        if skip and self.resnet_dt:
            idt = self.param("idt", _normal("idt"), (self.features,), self.dtype)
            y, dy = y * idt, None if dy is None else dy * idt
        if skip:
            twice = (lambda v: v) if self.features == n_in else (lambda v: jnp.concatenate([v, v], axis=-1))
            y, dy = y + twice(x), None if dy is None else dy + twice(dx)
        return y if dx is None else (y, dy)


def _hidden_layers(
    x: jax.Array, neuron: Sequence[int], activation: str, resnet_dt: bool, dtype, dx: jax.Array | None = None
):
    """DeePMD's stack of residual layers ``layer_0 .. layer_{n-1}``; call inside a compact ``__call__``.
    With a tangent dx, returns (x, dx) carried through every layer (see :class:`Layer`)."""
    x = x.astype(dtype)
    dx = None if dx is None else dx.astype(dtype)
    for k, n in enumerate(neuron):
        layer = Layer(n, activation, True, resnet_dt, dtype, name=f"layer_{k}")
        x, dx = (layer(x), None) if dx is None else layer(x, dx)
    return x if dx is None else (x, dx)


class EmbeddingNet(nn.Module):
    """Embedding net G(s): (..., 1) → (..., neuron[-1])."""

    neuron: Sequence[int]
    activation: str = "tanh"
    resnet_dt: bool = False
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(self, s: jax.Array, ds: jax.Array | None = None):
        """G(s); with a tangent ds (..., 1) also G'(s)·ds → (G, dG) (for the nodes of
        :mod:`~jaxmd_dp.model.fast.embed_table`)."""
        return _hidden_layers(s, self.neuron, self.activation, self.resnet_dt, self.dtype, ds)


class FittingNet(nn.Module):
    """Fitting net: descriptor (..., dim) → atomic energy (..., 1) eV, last layer linear."""

    neuron: Sequence[int]
    activation: str = "tanh"
    resnet_dt: bool = True
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        # The rows flat: the weight gradients of bias and idt then sum a (rows, width) array over its
        # rows. Over (1, rows, width), XLA CPU's float32 sum (YNNPACK) is several times slower than its
        # float64 one.
        lead = x.shape[:-1]
        x = _hidden_layers(x.reshape(-1, x.shape[-1]), self.neuron, self.activation, self.resnet_dt, self.dtype)
        y = Layer(1, "linear", False, False, self.dtype, name=f"layer_{len(self.neuron)}")(x)
        return y.reshape(*lead, 1)
