"""Per-type blocks (jaxmd_dp.model.type_groups): a block that would hold every atom runs in place (no
gather or scatter) and gives what the gathered block gives."""

import jax.numpy as jnp
import numpy as np

from jaxmd_dp.model.type_groups import gather_type, put_atoms, take_atoms

RNG = np.random.default_rng(5)
ATYPE = jnp.asarray([[0, 1, 1, -1, 0, 1], [1, 1, 0, 0, 0, -1]])  # two frames, −1 padding
X = jnp.asarray(RNG.normal(size=(2, 6, 3)))


def _per_type(capacity):
    """Σ over types of a per-type function of each atom's row, through the blocks of ``capacity``."""
    out = jnp.zeros((2, 6, 3))
    for t in (0, 1):
        order, valid = gather_type(ATYPE, t, capacity[t])
        out = put_atoms(out, order, valid, jnp.tanh((t + 1) * take_atoms(X, order)))
    return out, order


def test_block_of_every_atom_runs_in_place_with_the_gathered_numbers():
    in_place, order = _per_type((6, 6))
    assert order is None  # no gather
    gathered, order = _per_type((3, 3))  # the most atoms of each type in a frame
    assert order is not None and order.shape == (2, 3)
    np.testing.assert_allclose(in_place, gathered, rtol=0, atol=1e-15)
    want = np.where((np.asarray(ATYPE) >= 0)[..., None], np.tanh((np.asarray(ATYPE) + 1)[..., None] * X), 0)
    np.testing.assert_allclose(in_place, want, rtol=0, atol=1e-15)
