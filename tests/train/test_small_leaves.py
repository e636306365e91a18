"""The optimizer over packed small weights (jaxmd_dp.train.small_leaves): same updates as the optimizer it
wraps, and a state that converts to that optimizer's own layout (the checkpoints') and back."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxmd_dp.train.schedule import exp_decay
from jaxmd_dp.train.small_leaves import SMALL_LEAF, Packed, pack, pack_state, unpack, unpack_state
from jaxmd_dp.train.step import make_optimizer


def mixed_tree(rng, xp=np):
    """Weights of mixed sizes and dtypes, as a model in mixed precision has them."""
    return {
        "embed": {
            "bias": xp.asarray(rng.normal(size=25), np.float32),
            "matrix": xp.asarray(rng.normal(size=(40, 50)), np.float32),
            "row": xp.asarray(rng.normal(size=(1, 25)), np.float32),
        },
        "fit": [
            {
                "bias": xp.asarray(rng.normal(size=240)),
                "idt": xp.asarray(rng.normal(size=240)),
                "matrix": xp.asarray(rng.normal(size=(240, 240))),
            },
            {"bias": xp.asarray(rng.normal(size=1)), "matrix": xp.asarray(rng.normal(size=(240, 1)))},
        ],
    }


@pytest.mark.parametrize("xp", [np, jnp])
def test_pack_and_unpack_are_inverse(xp):
    tree = mixed_tree(np.random.default_rng(0), xp)
    p = pack(tree, xp)
    sizes = [x.size for x in jax.tree_util.tree_leaves(tree)]
    assert [x.size for x in p.large] == [s for s in sizes if s > SMALL_LEAF] == [2000, 57600]
    assert [x.dtype for x in p.small] == [np.float32, np.float64]  # one array per dtype, by name
    assert [x.size for x in p.small] == [50, 721]
    back = unpack(p, tree)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(tree)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree)):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("weight_decay,form", [(0.0, "pytorch"), (1e-3, "pytorch"), (0.0, "tensorflow")])
def test_packed_optimizer_steps_as_the_one_it_wraps(weight_decay, form):
    """make_optimizer's Adam (small weights packed) against the same optax chain on the weights as they are:
    same updates over 4 steps, and its state unpacked is the chain's state (what checkpoints hold)."""
    from jaxmd_dp.train.step import scale_by_adam_tf

    schedule = exp_decay(1e-3, 1e-8, 2, 20)
    packed = make_optimizer(schedule, weight_decay=weight_decay, form=form)
    adam = optax.scale_by_adam(eps=1e-8) if form == "pytorch" else scale_by_adam_tf(eps=1e-8)
    plain = optax.chain(
        *([optax.add_decayed_weights(weight_decay)] if weight_decay else []),
        adam,
        optax.scale_by_learning_rate(schedule),
    )
    rng = np.random.default_rng(1)
    params = jax.tree_util.tree_map(jnp.asarray, mixed_tree(rng))
    p_state, r_state, p_params, r_params = packed.init(params), plain.init(params), params, params
    assert any(
        isinstance(x, Packed) for x in jax.tree_util.tree_leaves(p_state, is_leaf=lambda x: isinstance(x, Packed))
    )
    for _ in range(4):
        grads = jax.tree_util.tree_map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
        pu, p_state = packed.update(grads, p_state, p_params)
        ru, r_state = plain.update(grads, r_state, r_params)
        for a, b in zip(jax.tree_util.tree_leaves(pu), jax.tree_util.tree_leaves(ru)):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6 if a.dtype == np.float32 else 1e-12)
        p_params, r_params = optax.apply_updates(p_params, pu), optax.apply_updates(r_params, ru)
    host = jax.tree_util.tree_map(np.asarray, p_state)
    saved = unpack_state(host, params)
    assert jax.tree_util.tree_structure(saved) == jax.tree_util.tree_structure(r_state)
    for a, b in zip(jax.tree_util.tree_leaves(saved), jax.tree_util.tree_leaves(r_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6 if a.dtype == np.float32 else 1e-12)
    again = pack_state(saved, p_state)
    assert jax.tree_util.tree_structure(again) == jax.tree_util.tree_structure(p_state)
    for a, b in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves(host)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
