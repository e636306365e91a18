"""The training frames' neighbour lists kept across epochs (training.neighbor_cache_mb): the stored lists
are the step's own, a second draw of a frame is served from the store, the memory budget is kept, and a
training step fed the stored lists computes what the step that builds them computes."""

import jax
import numpy as np
import pytest

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.data.sampler import make_batch
from jaxmd_dp.data.system import load_system
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.train import Trainer
from jaxmd_dp.train.neighbor_cache import NeighborCache
from jaxmd_dp.train.parallel import stack_batches
from jaxmd_dp.train.step import BatchLayout, device_batch
from shared_paths import require
from tiny import tiny_cu_dict

SEL = (48,)
RCUT = 4.5


@pytest.fixture(scope="module")
def cu():
    system = load_system(require("cu_asc22") / "iter.000000/02.fp/data.000", ["Cu"])
    spec = neighbor.allocate(system.coord, system.box, RCUT, SEL)
    return system, BatchLayout(spec, (system.natoms,), "jnp")


def built(layout, batch):
    nl = neighbor.build(layout.spec, batch["coord"], batch["box"], batch["atype"], "jnp", order="any")
    return np.asarray(nl.idx), np.asarray(nl.shift), np.asarray(nl.nneigh).max(axis=1)


def test_lists_are_the_steps_own_and_second_draw_is_stored(cu):
    system, layout = cu
    cache = NeighborCache([system], 1, 64)
    first = cache.attach(make_batch(system, np.array([3, 7])), layout)
    idx, shift, nmax = built(layout, make_batch(system, np.array([3, 7])))
    assert (idx >= 0).sum() > 0 and np.abs(shift).max() >= 1  # real neighbours, periodic images among them
    np.testing.assert_array_equal(first["nl_idx"], idx)
    np.testing.assert_array_equal(first["nl_shift"], shift)
    np.testing.assert_array_equal(first["nl_nmax"], nmax)
    assert [first[k].dtype for k in ("nl_idx", "nl_shift", "nl_nmax")] == [np.int32, np.int16, np.int32]
    store = cache._stores[0]
    assert len(store.lists) == 0  # built on the device, passed on without waiting; stored at the next call
    assert cache.used == system.nframes * system.natoms * sum(SEL) * 8 + system.nframes * 5
    cache.attach(make_batch(system, np.array([5])), layout)
    assert sorted(store.lists) == [3, 7]
    again = cache.attach(make_batch(system, np.array([7, 3])), layout)  # both from the store
    assert sorted(store.lists) == [3, 5, 7] and isinstance(again["nl_idx"], np.ndarray)
    np.testing.assert_array_equal(again["nl_idx"], idx[::-1])
    np.testing.assert_array_equal(again["nl_shift"], shift[::-1])
    np.testing.assert_array_equal(again["nl_nmax"], nmax[::-1])
    assert again["nl_idx"].dtype == np.int32


def test_budget_too_small_builds_every_time(cu):
    system, layout = cu
    assert not NeighborCache([system], 1, 0).enabled
    cache = NeighborCache([system], 1, 1)  # 1 MiB < the system's 3.7 MB of lists
    got = cache.attach(make_batch(system, np.array([5])), layout)
    assert cache._stores[0] is None and cache.used == 0
    np.testing.assert_array_equal(got["nl_idx"], built(layout, make_batch(system, np.array([5])))[0])


def test_stacked_workers_batches(cu):
    system, layout = cu
    cache = NeighborCache([system], 1, 64)
    batch = cache.attach(stack_batches([make_batch(system, np.array([0])), make_batch(system, np.array([9]))]), layout)
    assert batch["nl_idx"].shape == (2, 1, system.natoms, sum(SEL))
    for w, frame in enumerate((0, 9)):
        np.testing.assert_array_equal(batch["nl_idx"][w], built(layout, make_batch(system, np.array([frame])))[0])


def test_step_with_stored_lists_computes_the_same():
    config = config_from_dict(tiny_cu_dict(numb_steps=4))
    trainer = Trainer(config, "/nonexistent-unused", log=lambda *a: None)
    assert trainer.neighbor_cache.enabled  # on by default
    batch = trainer.batches.next()
    layout = trainer.layout_for(batch)
    trainer.neighbor_cache.attach(batch, layout)  # builds them; stored at the next call
    stored = trainer.neighbor_cache.attach(batch, layout)  # served from it
    copy = lambda: jax.tree_util.tree_map(lambda x: x.copy(), trainer.state)  # noqa: E731 (the step donates)
    plain_state, plain = trainer.train_step(copy(), trainer.stats, device_batch(batch), layout)
    cached_state, cached = trainer.train_step(copy(), trainer.stats, device_batch(stored), layout)
    for k in ("rmse", "rmse_e", "rmse_f", "nneigh_max"):
        np.testing.assert_allclose(np.asarray(cached[k]), np.asarray(plain[k]), rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(cached_state.params), jax.tree_util.tree_leaves(plain_state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-15)
