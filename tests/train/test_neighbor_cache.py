"""The training frames and their neighbour lists kept on the device across epochs
(training.neighbor_cache_mb): the stored frames and lists are the sampler's and the step's own, a second
draw of a frame is served from the store, systems of one atom count share a store, the memory budget is
kept, merged batches are the host merge's, and a training step fed the stored lists computes what the
step that builds them computes."""

import jax
import numpy as np
import pytest
from shared_paths import require
from tiny import tiny_cu_dict

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.data.sampler import make_batch
from jaxmd_dp.data.system import load_system
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.geometry.pair_partner import pair_partners
from jaxmd_dp.train import Trainer
from jaxmd_dp.train.merge import MergedShape, merge_batch
from jaxmd_dp.train.neighbor_cache import FIND_KEYS, FRAME_KEYS, NeighborCache
from jaxmd_dp.train.parallel import stack_batches
from jaxmd_dp.train.step import NL_KEYS, BatchLayout, device_batch, take_rows

SEL = (48,)
RCUT = 4.5


@pytest.fixture(scope="module")
def cu():
    """Two 32-atom Cu systems (300 and 1,000 frames) and the layout of their shape (with pair sharing:
    the lists carry each slot's reverse pair)."""
    root = require("cu_asc22")
    systems = [
        load_system(root / "iter.000000/02.fp/data.000", ["Cu"]),
        load_system(root / "cu.fcc.02x02x02/02.md/sys-0032/deepmd", ["Cu"]),
    ]
    box = np.concatenate([s.box for s in systems])
    spec = neighbor.allocate(np.concatenate([s.coord for s in systems]), box, RCUT, SEL)
    return systems, BatchLayout(spec, (32,), "jnp", share=True)


def built(layout, batch):
    nl = neighbor.build(layout.spec, batch["coord"], batch["box"], batch["atype"], "jnp", order="any")
    lists = np.asarray(nl.idx), np.asarray(nl.shift), np.asarray(nl.nneigh).max(axis=1)
    if not layout.share:
        return lists
    return lists + (np.asarray(pair_partners(nl.idx, nl.shift, batch["atype"], layout.spec.sel)),)


def aval(x):
    """Shape, dtype and weak type: what the jitted step compiles for (a Python float is weakly typed)."""
    return jax.eval_shape(lambda y: y, x)


def taken(got: dict) -> dict:
    """The arrays the step reads from a batch given as its rows of the store: only the rows come from
    the host, the frames and lists are the store's device arrays."""
    assert set(FRAME_KEYS).isdisjoint(got) and got["rows"].dtype == got["slots"].dtype == np.int32
    assert all(isinstance(x, jax.Array) for _, x in got["store"].items())
    return take_rows(device_batch(got))


def assert_batch(got: dict, system, frames, layout):
    """got holds the sampler's frames ``frames`` of ``system`` and the step's own lists for them, as the
    step would compile for the sampler's batch."""
    want = make_batch(system, np.asarray(frames))
    for k in FRAME_KEYS + FIND_KEYS:
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=k)
        assert aval(got[k]) == aval(want[k]), k
    for k, w in zip(NL_KEYS, built(layout, want)):
        np.testing.assert_array_equal(np.asarray(got[k]), w, err_msg=k)
    assert [got[k].dtype for k in NL_KEYS] == [np.int32, np.int16, np.int32, np.int32]


def test_frames_and_lists_are_the_samplers_and_steps_own(cu):
    (system, other), layout = cu
    cache = NeighborCache([system, other], 1, 64)
    first = taken(cache.attach(make_batch(system, np.array([3, 7])), layout))
    assert_batch(first, system, [3, 7], layout)
    idx, shift, *_ = built(layout, make_batch(system, np.array([3, 7])))
    assert (idx >= 0).sum() > 0 and np.abs(shift).max() >= 1  # real neighbours, periodic images among them
    group = cache._groups[(32, True)]
    assert group.first == {0: 0, 1: 300}  # both systems of 32 atoms in one store, end to end
    assert group.lists[0].shape[0] == 1300  # a slot for every frame (no bound on the draws)
    assert cache.used == sum(x.nbytes for x in jax.tree_util.tree_leaves((group.data, group.lists)))
    cache.attach(make_batch(other, np.array([0, 999]), 1), layout)  # another system's rows, then more of the first's
    cache.attach(make_batch(system, np.array([5])), layout)
    # slots in draw order, given out as the lists are built and stored (the same call)
    assert {r: group.slot[r] for r in np.flatnonzero(group.slot >= 0)} == {3: 0, 7: 1, 300: 2, 1299: 3, 5: 4}
    again = taken(cache.attach(make_batch(system, np.array([7, 3])), layout))  # both from the store
    assert_batch(again, system, [7, 3], layout)
    assert_batch(taken(cache.attach(make_batch(other, np.array([999]), 1), layout)), other, [999], layout)


def test_batch_prepared_earlier_reads_the_current_store(cu):
    """Storing new lists updates the store in place (its old arrays donated); a batch prepared before
    then reads its rows from the arrays current when it is used, so it stays valid, with its numbers."""
    (system, _), layout = cu
    cache = NeighborCache([system], 1, 64)
    early = cache.attach(make_batch(system, np.array([4])), layout)
    old = jax.tree_util.tree_leaves(early["store"])
    cache.attach(make_batch(system, np.array([8, 9])), layout)  # new frames: the lists stored in place
    assert any(x.is_deleted() for x in old)
    assert_batch(taken(early), system, [4], layout)
    assert_batch(jax.jit(take_rows)(device_batch(early)), system, [4], layout)
    # a compiled executable (jit → lower → compile, as bench/step_time.py runs the step) takes the batch too
    assert_batch(jax.jit(take_rows).lower(device_batch(early)).compile()(device_batch(early)), system, [4], layout)


def test_merged_batch_is_the_host_merge(cu):
    (system, other), layout = cu
    cache = NeighborCache([system, other], 1, 64)
    shape = MergedShape(atoms=100, frames=4)
    host = make_batch(other, np.array([11, 4, 2]), 1)
    want = merge_batch({**host, **dict(zip(NL_KEYS, built(layout, host)))}, shape)
    for _ in range(2):  # built in the call, then from the store
        got = cache.attach(host, layout, merge=shape)
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=k)
            assert aval(got[k]) == aval(want[k]), k
    # the merged partners point into the merged list: slot s of atom i ↔ a slot of atom idx[s] holding i
    idx, pair = np.asarray(got["nl_idx"][0]), np.asarray(got["nl_pair"][0]).reshape(-1)
    nnei = idx.shape[-1]
    has = np.flatnonzero(pair >= 0)
    assert len(has) == int((idx >= 0).sum())  # one type, no list cut short: every pair has its partner
    assert np.array_equal(idx.reshape(-1)[pair[has]], has // nnei) and np.array_equal(pair[pair[has]], has)


def test_slots_for_the_frames_a_run_draws(cu):
    """With ``draws`` (a short run), a group keeps list slots for that many frames only: its device memory
    follows the run's length; frames past the slots are served as not stored, with the same numbers."""
    (system, other), layout = cu
    cache = NeighborCache([system, other], 1, 64, draws=3)
    assert_batch(taken(cache.attach(make_batch(system, np.array([3, 7])), layout)), system, [3, 7], layout)
    group = cache._groups[(32, True)]
    assert group.lists[0].shape[0] == 3
    assert cache.used == sum(x.nbytes for x in jax.tree_util.tree_leaves((group.data, group.lists)))
    past = cache.attach(make_batch(system, np.array([1, 2])), layout)  # two new frames, one slot left
    assert isinstance(past["coord"], np.ndarray) and group.taken == 2  # the host's frames, lists built
    assert_batch(past, system, [1, 2], layout)
    assert_batch(taken(cache.attach(make_batch(other, np.array([5]), 1), layout)), other, [5], layout)
    assert group.taken == 3
    assert_batch(taken(cache.attach(make_batch(system, np.array([7, 3])), layout)), system, [7, 3], layout)
    merged = cache.attach(make_batch(other, np.array([5]), 1), layout, merge=MergedShape(atoms=64, frames=2))
    host = make_batch(other, np.array([5]), 1)
    want = merge_batch({**host, **dict(zip(NL_KEYS, built(layout, host)))}, MergedShape(atoms=64, frames=2))
    for k in want:
        np.testing.assert_array_equal(np.asarray(merged[k]), np.asarray(want[k]), err_msg=k)


def test_budget_too_small_builds_every_time(cu):
    (system, other), layout = cu
    assert not NeighborCache([system], 1, 0).enabled
    cache = NeighborCache([system, other], 1, 1)  # 1 MiB < the systems' 17 MB of lists
    got = cache.attach(make_batch(system, np.array([5])), layout)
    assert cache._groups[(32, True)] is None and cache.used == 0
    assert isinstance(got["coord"], np.ndarray)  # the host's frames
    assert_batch(got, system, [5], layout)


def test_stacked_workers_batches(cu):
    (system, _), layout = cu
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
    trainer.neighbor_cache.attach(batch, layout)  # builds and stores them
    stored = trainer.neighbor_cache.attach(batch, layout)  # served from the store
    copy = lambda: jax.tree_util.tree_map(lambda x: x.copy(), trainer.state)  # noqa: E731 (the step donates)
    plain_state, plain = trainer.train_step(copy(), trainer.stats, device_batch(batch), layout)
    cached_state, cached = trainer.train_step(copy(), trainer.stats, device_batch(stored), layout)
    for k in ("rmse", "rmse_e", "rmse_f", "nneigh_max"):
        np.testing.assert_allclose(np.asarray(cached[k]), np.asarray(plain[k]), rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(cached_state.params), jax.tree_util.tree_leaves(plain_state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-15)
