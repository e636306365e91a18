"""Small helpers shared by the Pallas kernels (padding, Triton compiler parameters, tracing with jit).

Pallas' Triton backend needs every array a kernel loads, computes or stores to have a power-of-two
number of elements, so the wrappers pad the atom and slot axes up to multiples of power-of-two
blocks and slice the outputs back.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas import triton as plt


def next_pow2(n: int) -> int:
    """Smallest power of two >= max(n, 1)."""
    n = max(int(n), 1)
    return 1 << (n - 1).bit_length()


def round_up(n: int, m: int) -> int:
    """Smallest multiple of ``m`` >= max(n, 1)."""
    n = max(int(n), 1)
    return -(-n // m) * m


def pad_axis(x: jax.Array, axis: int, size: int, value=0) -> jax.Array:
    """Pad ``x`` at the end of ``axis`` up to ``size`` with ``value`` (no-op when already that size)."""
    extra = size - x.shape[axis]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def triton_params(num_warps: int = 4, num_stages: int = 1) -> plt.CompilerParams:
    """Compiler parameters that select Pallas' Triton backend explicitly.

    With jax 0.10 a ``pallas_call`` without compiler parameters may be routed to Mosaic GPU (when
    ``jax_pallas_use_mosaic_gpu`` is set); passing Triton's ``CompilerParams`` pins the Triton lowering.
    """
    return plt.CompilerParams(num_warps=num_warps, num_stages=num_stages)


def jit_enabled(fn):
    """``fn`` run with jax's jit enabled, also where its caller traces with ``jax.disable_jit()`` (as
    ``jaxmd_dp.runtime.inline_trace`` does on the CPU): there a kernel's ``lax.fori_loop`` would run as a Python
    loop, unrolled into the kernel. For the functions that call ``pallas_call``."""

    @functools.wraps(fn)
    def with_jit(*args, **kwargs):
        with jax.disable_jit(False):
            return fn(*args, **kwargs)

    return with_jit


def box16(box: jax.Array | None, nf: int, dtype) -> jax.Array:
    """(nf, 3, 3) cell (rows are cell vectors), or zeros when None, flattened row-major and padded to 16."""
    if box is None:
        return jnp.zeros((nf, 16), dtype)
    b = jnp.asarray(box, dtype).reshape(nf, 9)
    return pad_axis(b, 1, 16)
