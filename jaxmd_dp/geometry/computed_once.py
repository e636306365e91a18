"""An array that XLA computes once into memory, however many fusions read it (CPU).

XLA fuses an element-wise producer into each of its consumers, recomputing it there: cheap for a
product, not for a chain that starts with gathers. The environment matrix's pair vectors come from the
stored neighbour list (a dynamic slice), the coordinates (a gather) and the periodic shifts; in the water
training step XLA CPU recomputed that chain, with the switch function after it, in each fusion that
reads the rows or a term of their Jacobian, several times the cost per element of the descriptor's other
element-wise passes. The training step's spread of T's cotangent over the slots reads that cotangent
computed once too, and Rᵀ·G reads R transposed from memory, so that XLA CPU hands its batched dots to its
matmul library (:mod:`jaxmd_dp.model.fast.train_products`).

XLA CPU removes ``lax.optimization_barrier`` before fusion, but keeps a while loop
whose trip count it cannot know: :func:`computed_once` writes x into the loop's carry, and the readers
then read that buffer. On a GPU a while loop reads its condition back on the host each trip, so there
(and on any other backend) x is returned as it is.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.custom_jvp
def computed_once(x: jax.Array) -> jax.Array:
    """x itself, computed once into memory on the CPU (see the module docstring). Any shape and dtype;
    derivatives of any order pass straight through (the tangent of x is returned as it is)."""
    if jax.default_backend() != "cpu" or x.size == 0:
        return x
    first = x.reshape(-1)[:1].astype(jnp.float32)
    trips = 1 + jnp.any(first != first).astype(jnp.int32)  # 1, but XLA cannot prove it (NaN is unequal)
    return jax.lax.fori_loop(0, trips, lambda i, carry: x, jnp.zeros_like(x))


@computed_once.defjvp
def _computed_once_jvp(primals, tangents):
    return computed_once(primals[0]), tangents[0]
