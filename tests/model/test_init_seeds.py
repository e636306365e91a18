"""``model.fitting_net.seed``: the fitting nets' initial weights come from a generator of their own when it is
set and differs from the descriptor's seed; otherwise every weight comes from the one stream of the
descriptor's seed, in the tree's leaf order, as always."""

import jax
import numpy as np

from jaxmd_dp.model.energy import init_params, param_shapes
from jaxmd_dp.model.hyper import ModelHyper
from jaxmd_dp.model.nets import init_moments

MODEL = {
    "type_map": ["O", "H"],
    "descriptor": {
        "type": "se_e2_a",
        "sel": [6, 12],
        "rcut": 4.0,
        "rcut_smth": 0.5,
        "neuron": [4, 8],
        "axis_neuron": 2,
        "type_one_side": False,
    },
    "fitting_net": {"neuron": [8, 8], "resnet_dt": True},
}


def _hyper():
    return ModelHyper.from_deepmd(MODEL)


def _one_stream(hyper, seed):
    """Every weight drawn from one generator seeded by ``seed`` in leaf order (the weights before
    fitting_net.seed was honoured)."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        mean, std = init_moments(path[-1].key, leaf.shape)
        return np.asarray(mean + std * rng.standard_normal(leaf.shape), leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, param_shapes(hyper))


def _equal(a, b) -> bool:
    return all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.array_equal, a, b)))


def test_unset_or_equal_fitting_seed_gives_the_one_stream_bitwise():
    hyper = _hyper()
    ref = _one_stream(hyper, 7)
    for params in (init_params(hyper, 7), init_params(hyper, 7, None), init_params(hyper, 7, 7)):
        assert _equal(params, ref)


def test_another_fitting_seed_changes_the_fitting_weights_only():
    hyper = _hyper()
    ref = init_params(hyper, 7)
    other = init_params(hyper, 7, 8)
    assert _equal(other["descriptor"], ref["descriptor"])
    for a, b in zip(jax.tree_util.tree_leaves(other["fitting"]), jax.tree_util.tree_leaves(ref["fitting"])):
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.size > 1 and np.std(b) > 0:  # the random leaves (not the constant ones)
            assert not np.array_equal(a, b)
    # the fitting nets' own stream: the same whatever the descriptor's seed
    assert _equal(init_params(hyper, 11, 8)["fitting"], other["fitting"])
    assert not _equal(init_params(hyper, 11, 8)["descriptor"], other["descriptor"])
    assert _equal(init_params(hyper, 7, 9)["descriptor"], ref["descriptor"])
    assert not _equal(init_params(hyper, 7, 9)["fitting"], other["fitting"])
