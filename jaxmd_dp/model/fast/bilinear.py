"""Bilinear products whose transposes are written out, for the training step.

:func:`with_written_transposes` turns product(A, B) into a ``custom_jvp`` whose tangent terms are
``linear_call``s with the given transposes (either term left to autodiff when its transpose is None).
Used where autodiff's own transposes run slowly on XLA CPU: the table's outer product
(:func:`jaxmd_dp.model.fast.embed_table.outer`) and the descriptor's per-atom products
(:mod:`jaxmd_dp.model.fast.train_products`).

Limits of ``linear_call``: no vmap, and the residual of a written term (the other operand) must carry no
tangent where the transpose is differentiated again; the training step differentiates the forces in the
weights only, reverse mode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
from jax.custom_derivatives import SymbolicZero, linear_call


def with_written_transposes(
    product: Callable, transpose_in_first: Callable | None = None, transpose_in_second: Callable | None = None
) -> Callable:
    """product(A, B), bilinear, as a ``custom_jvp``. transpose_in_first(B, u): A's cotangent from the
    product's cotangent u; transpose_in_second(A, u): B's. A term without its transpose is the product of
    its tangent, transposed by autodiff."""

    @jax.custom_jvp
    @functools.wraps(product)
    def f(A, B):
        return product(A, B)

    def f_jvp(primals, tangents):
        A, B = primals
        dA, dB = tangents
        parts = []  # JAX calls this rule only when dA or dB is not a symbolic zero
        if not isinstance(dA, SymbolicZero):
            parts.append(
                f(dA, B)
                if transpose_in_first is None
                else linear_call(lambda b, da: product(da, b), transpose_in_first, B, dA)
            )
        if not isinstance(dB, SymbolicZero):
            parts.append(f(A, dB) if transpose_in_second is None else linear_call(product, transpose_in_second, A, dB))
        return f(A, B), sum(parts[1:], parts[0])

    f.defjvp(f_jvp, symbolic_zeros=True)
    return f
