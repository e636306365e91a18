"""AdamW, gradient clipping and the weights' moving average against optax's transforms and DeePMD-kit's
rule, on a small tree of weights over a few updates."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from test_small_leaves import mixed_tree

from jaxmd_dp.train.ema import ema_checkpoint_dir, ema_update
from jaxmd_dp.train.schedule import exp_decay
from jaxmd_dp.train.small_leaves import Packed
from jaxmd_dp.train.step import make_optimizer

SCHEDULE = exp_decay(1e-2, 1e-4, 2, 20)


@functools.partial(jax.jit, static_argnums=0)
def _run(opt, params, grads_seq):
    """The weights after applying ``opt`` to each gradient tree of ``grads_seq`` in turn."""
    state = opt.init(params)
    for grads in grads_seq:
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


def _case(scale=1.0, steps=4, dtype=None):
    """Weights (``dtype``: all of it, else mixed precision) and ``steps`` gradient trees."""
    rng = np.random.default_rng(3)
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), mixed_tree(rng))
    grads = [
        jax.tree_util.tree_map(lambda x: jnp.asarray(scale * rng.normal(size=x.shape), x.dtype), params)
        for _ in range(steps)
    ]
    return params, grads


def _close(a_tree, b_tree, f64=1e-13):
    """Leaf by leaf equal to the rounding of the dtype, relative to the leaf's largest entry."""
    for a, b in zip(jax.tree_util.tree_leaves(a_tree), jax.tree_util.tree_leaves(b_tree)):
        assert a.dtype == b.dtype
        tol = 1e-6 if a.dtype == np.float32 else f64
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol * np.abs(b).max())


def test_adamw_is_optax_adamw():
    params, grads = _case()
    ours = _run(make_optimizer(SCHEDULE, weight_decay=0.05, kind="AdamW"), params, grads)
    theirs = _run(optax.adamw(SCHEDULE, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.05), params, grads)
    _close(ours, theirs)
    adam_l2 = _run(make_optimizer(SCHEDULE, weight_decay=0.05, kind="Adam"), params, grads)
    assert not np.allclose(jax.tree_util.tree_leaves(adam_l2)[0], jax.tree_util.tree_leaves(ours)[0])


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_clipping_is_optax_clip_by_global_norm_before_the_optimizer(kind):
    """Float64 weights (the default precision): the norm over the packed small weights is optax's to
    rounding (float32 weights would sum their squares in another order, in float32)."""
    params, grads = _case(scale=10.0, dtype=np.float64)
    norms = [float(optax.tree.norm(g)) for g in grads]
    max_norm = float(np.median(norms))  # some steps clipped, some not
    assert min(norms) < max_norm < max(norms)
    ours = _run(make_optimizer(SCHEDULE, weight_decay=0.01, kind=kind, max_norm=max_norm), params, grads)
    inner = (
        optax.adamw(SCHEDULE, eps=1e-8, weight_decay=0.01)
        if kind == "AdamW"
        else optax.chain(optax.add_decayed_weights(0.01), optax.adam(SCHEDULE, eps=1e-8))
    )
    theirs = _run(optax.chain(optax.clip_by_global_norm(max_norm), inner), params, grads)
    _close(ours, theirs)
    unclipped = _run(make_optimizer(SCHEDULE, weight_decay=0.01, kind=kind), params, grads)
    assert not np.allclose(jax.tree_util.tree_leaves(unclipped)[0], jax.tree_util.tree_leaves(ours)[0])


def test_default_optimizer_holds_adam_alone():
    """Off, a feature adds no transform: the default chain is Adam and the learning rate, as ever."""
    params, _ = _case()
    state = make_optimizer(SCHEDULE).init(params)
    assert [type(s).__name__ for s in state] == ["ScaleByAdamState", "ScaleByScheduleState"]
    assert isinstance(state[0].mu, Packed)
    clipped = make_optimizer(SCHEDULE, kind="AdamW", weight_decay=0.1, max_norm=1.0).init(params)
    names = ["EmptyState", "ScaleByAdamState", "EmptyState", "ScaleByScheduleState"]  # clip, Adam, decay, lr
    assert [type(s).__name__ for s in clipped] == names


@pytest.mark.parametrize("decay", [0.999, 0.9, 0.3, 0.0])
def test_ema_is_deepmds_rule(decay):
    """DeePMD-kit's ModelEMA.update, ema.lerp_(w, 1 − decay), computed by hand over five steps of moving
    weights."""
    rng = np.random.default_rng(5)
    start = mixed_tree(rng)
    ema = jax.tree_util.tree_map(jnp.asarray, start)
    want = jax.tree_util.tree_map(np.array, start)
    update = jax.jit(ema_update, static_argnums=2)
    w = 1.0 - decay
    for _ in range(5):
        params = mixed_tree(rng)
        ema = update(ema, jax.tree_util.tree_map(jnp.asarray, params), decay)
        want = jax.tree_util.tree_map(
            lambda e, p: (e + w * (p - e)) if w < 0.5 else (p - (p - e) * (1.0 - w)), want, params
        )
    _close(ema, want, f64=1e-14)
    if decay == 0.0:  # all weight on the new weights
        _close(ema, params, f64=0.0)


def test_ema_checkpoint_directory_is_deepmds_prefix():
    assert str(ema_checkpoint_dir("model.ckpt")) == "model_ema.ckpt"
    assert str(ema_checkpoint_dir("ckpt/model")) == "ckpt/model_ema"
