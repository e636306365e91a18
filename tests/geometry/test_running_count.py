"""running_count: the cumulative count of a mask as two float32 matmuls, equal to jnp.cumsum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry.running_count import running_count


@pytest.mark.parametrize("shape, block, density", [
    ((3, 1000), 64, 0.1),  # a row not a multiple of the block: padded
    ((2, 5, 96), 32, 0.5),  # leading axes, whole blocks
    ((4, 7), 64, 0.7),  # shorter than one block
    ((1, 1), 64, 1.0),
    ((2, 20000), 64, 1.0),  # all True: counts far past one block, past float16/bfloat16 integers
    ((3, 300), 1, 0.3),  # blocks of one entry: the second product does all the work
])
def test_equals_cumsum(shape, block, density):
    mask = np.random.default_rng(3).random(shape) < density
    got = jax.jit(lambda m: running_count(m, block))(jnp.asarray(mask))
    assert got.dtype == jnp.int32 and got.shape == shape
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(mask, axis=-1))


def test_rows_too_long_for_float32_counts():
    with pytest.raises(ValueError, match="2\\*\\*24"):
        jax.eval_shape(running_count, jax.ShapeDtypeStruct((2**24,), jnp.bool_))
