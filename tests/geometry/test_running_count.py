"""running_count: the cumulative count of a mask as float32 matmuls, equal to jnp.cumsum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry.running_count import running_count


@pytest.mark.parametrize(
    "shape, block, density",
    [
        ((3, 1000), 64, 0.1),  # a row not a multiple of the block: padded
        ((2, 5, 96), 32, 0.5),  # leading axes, whole blocks
        ((4, 7), 64, 0.7),  # shorter than one block
        ((1, 1), 64, 1.0),
        ((2, 20000), 64, 1.0),  # all True: counts far past one block, past float16/bfloat16 integers
        ((3, 300), 2, 0.3),  # blocks of two: nine levels
        ((2, 1000), 4, 0.5),  # block totals counted in blocks again, four levels deep
    ],
)
def test_equals_cumsum(shape, block, density):
    mask = np.random.default_rng(3).random(shape) < density
    got = jax.jit(lambda m: running_count(m, block))(jnp.asarray(mask))
    assert got.dtype == jnp.int32 and got.shape == shape
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(mask, axis=-1))


def test_rows_too_long_for_float32_counts():
    with pytest.raises(ValueError, match="2\\*\\*24"):
        jax.eval_shape(running_count, jax.ShapeDtypeStruct((2**24,), jnp.bool_))


def test_long_rows_hold_only_small_triangles():
    """A row of 2,000,000 entries (a large frame's pair packing) is counted with 64 × 64 triangles, not a
    triangle over its 31,250 blocks (3.9 GB in float32)."""
    jaxpr = jax.make_jaxpr(lambda m: running_count(m, 64))(jax.ShapeDtypeStruct((1, 2_000_000), jnp.bool_))
    sizes = [np.size(c) for c in jaxpr.consts]  # the triangles (scalars stay literals in the equations)
    assert sizes and max(sizes) <= 64 * 64
