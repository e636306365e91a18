"""Per-type blocks (jaxmd_dp.model.fast.type_groups): a block that would hold every atom runs in place (no
gather or scatter) and gives what the gathered block gives."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.model.fast.type_groups import gather_type, inverse_type, put_atoms, take_atoms, take_atoms_rev

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


def test_reverse_only_blocks_give_the_same_values_and_derivatives():
    """take_atoms_rev (a gather whose VJP is the inverse gather) against take_atoms (autodiff's
    scatter-add): the same per-type sums, gradients and second reverse derivatives, with padding atoms and
    blocks smaller than the frame."""

    def per_type(x, rev):
        out = jnp.zeros((2, 6, 3))
        for t in (0, 1):
            order, valid = gather_type(ATYPE, t, 3)
            block = take_atoms_rev(x, ATYPE, t, order, valid) if rev else take_atoms(x, order)
            out = put_atoms(out, order, valid, jnp.tanh((t + 1) * block))
        return out

    np.testing.assert_allclose(per_type(X, True), per_type(X, False), rtol=0, atol=1e-15)
    w = jnp.asarray(RNG.normal(size=(2, 6, 3)))
    loss = lambda x, rev: jnp.sum(w * per_type(x, rev) ** 2)  # noqa: E731
    g = [jax.grad(loss)(X, rev) for rev in (True, False)]
    np.testing.assert_allclose(g[0], g[1], rtol=1e-13, atol=1e-15)
    assert float(jnp.max(jnp.abs(g[1]))) > 0.1  # a gradient that could differ
    # grad of a loss on the gradient (the training step's weight gradient through the forces)
    gg = [jax.grad(lambda x, rev=rev: jnp.sum(jax.grad(loss)(x, rev) ** 2))(X) for rev in (True, False)]
    np.testing.assert_allclose(gg[0], gg[1], rtol=1e-12, atol=1e-14)
    # padding atoms (type −1) get nothing from either path
    assert np.all(np.asarray(g[0])[np.asarray(ATYPE) < 0] == 0)


def test_inverse_type_is_the_inverse_of_gather_type():
    for t in (0, 1):
        order, valid = gather_type(ATYPE, t, 3)
        inv, keep = inverse_type(ATYPE, t, 3)
        np.testing.assert_array_equal(keep, np.asarray(ATYPE) == t)
        for f in range(2):
            for i in np.flatnonzero(np.asarray(keep[f])):
                assert int(order[f, inv[f, i]]) == i and bool(valid[f, inv[f, i]])
