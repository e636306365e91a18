"""Many atom types: the nets stacked (jaxmd_dp.model.fast.net_groups) give the nets' numbers one by one.

- Relabelled data (tests/many_types_data.py): water's atoms split into 5 types, Al-Cu-Mg's into 6 (its cell
  doubled); a model of the split types whose nets, statistics and energy bias are copies of a model of the
  unsplit types gives that model's energies, forces and virials (1e-10, float64), on the exact path and on
  the training step's packed path (the split models' nets stacked, 25 / 36 embedding nets).
- DeePMD-kit's fixtures with every model's nets stacked: its predictions to 1e-10, and the packed path's
  numbers and weight gradients as the nets one by one.
- The tile layout and the type blocks hold every row once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_fixtures as fixture_tests
import test_pair_pack as pair_pack_tests
from fixture_models import load_fixture, max_rel
from many_types_data import ALMGCU_6, WATER_5, old_type_of, write_system
from shared_paths import require

from jaxmd_dp.data.system import load_system
from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.model.energy import ModelHyper, Stats, init_params, predict, type_capacity
from jaxmd_dp.model.fast import net_groups
from jaxmd_dp.model.fast.pair_pack import pair_counts
from jaxmd_dp.model.plan import ExecutionPlan


def _hyper(type_map, sel, rcut, type_one_side):
    return ModelHyper.from_deepmd(
        {
            "type_map": list(type_map),
            "descriptor": {
                "type": "se_e2_a",
                "sel": list(sel),
                "rcut": rcut,
                "rcut_smth": 0.5,
                "neuron": [4, 8],
                "axis_neuron": 4,
                "type_one_side": type_one_side,
                "resnet_dt": True,
            },
            "fitting_net": {"neuron": [8, 8]},
        }
    )


def _random_model(hyper, seed):
    """Weights with DeePMD-kit's initialisation (matrices doubled: livelier forces) and statistics in its
    structure (one row per centre type and neighbour-type section), different for every pair."""
    rng = np.random.default_rng(seed)
    params = jax.tree_util.tree_map(lambda x: x * 2.0 if x.ndim == 2 else x, init_params(hyper, seed))
    nt, sec = hyper.ntypes, np.repeat(np.arange(hyper.ntypes), hyper.sel)
    davg, dstd = np.zeros((nt, hyper.nnei, 4)), np.ones((nt, hyper.nnei, 4))
    rows_avg, rows_std = rng.uniform(0.05, 0.15, (nt, nt)), rng.uniform(0.1, 0.2, (nt, nt, 4))
    davg[:, :, 0] = rows_avg[:, sec]
    dstd[:] = rows_std[:, sec]
    return params, Stats(davg, dstd, rng.uniform(-2.0, 2.0, nt))


def _split_model(hyper, params, stats, new_hyper, old):
    """The split types' model: each new type's nets, statistics and bias copied from its old type's.
    old: (new ntypes,) the old type of each new type."""
    nt, new_nt = hyper.ntypes, new_hyper.ntypes
    if hyper.type_one_side:
        embed = {f"embed_{j}": params["descriptor"][f"embed_{old[j]}"] for j in range(new_nt)}
    else:
        embed = {
            f"embed_{j * new_nt + i}": params["descriptor"][f"embed_{old[j] * nt + old[i]}"]
            for j in range(new_nt)
            for i in range(new_nt)
        }
    fit = {f"fit_{t}": params["fitting"][f"fit_{old[t]}"] for t in range(new_nt)}
    start = np.concatenate([[0], np.cumsum(hyper.sel)[:-1]])
    section_row = start[old[np.repeat(np.arange(new_nt), new_hyper.sel)]]  # a slot of the old section
    davg = np.asarray(stats.davg)[old][:, section_row]
    dstd = np.asarray(stats.dstd)[old][:, section_row]
    return {"descriptor": embed, "fitting": fit}, Stats(davg, dstd, np.asarray(stats.energy_bias)[old])


def _predict(hyper, params, stats, system, plan_for=None):
    coord, box = jnp.asarray(system.coord), jnp.asarray(system.box)
    atype = jnp.asarray(system.atype)
    spec = allocate(system.coord, system.box, hyper.rcut, hyper.sel)
    nl = jax.jit(lambda c, b: build(spec, c, b, atype, order="any"))(coord, box)
    assert np.all(np.asarray(nl.nneigh).max(axis=(0, 1)) <= np.asarray(hyper.sel)), "overflows sel"
    plan = ExecutionPlan() if plan_for is None else plan_for(nl)
    return jax.jit(lambda: predict(hyper, params, stats, coord, box, atype, nl, plan=plan))()


def _packed_plan(hyper, system):
    """The training step's plan: packed pairs (the most of any frame), per-type blocks, uniform empty rows."""

    def plan(nl):
        sizes = tuple(int(c) for c in np.asarray(pair_counts(nl.idx >= 0, hyper.sel)).max(axis=0))
        return ExecutionPlan(type_capacity([system.atype], hyper.ntypes), pack=sizes, uniform_empty=True)

    return plan


CASES = {  # name: (source system, split, unsplit type_map, unsplit sel, split sel, rcut Å, cells)
    "water": ("water/data_0", WATER_5, ["O", "H"], [60, 120], [30, 30, 40, 40, 40], 6.0, (1, 1, 1)),
    "almgcu": (
        "almgcu_jiang2021_subset/init.1240",
        ALMGCU_6,
        ["Mg", "Al", "Cu"],
        [20, 30, 20],
        [10, 10, 15, 15, 10, 10],
        5.0,
        (2, 1, 1),
    ),
}


@pytest.mark.parametrize(
    "name,type_one_side", [("water", False), ("water", True), ("almgcu", False)], ids=["water-pairs", "water", "almgcu"]
)
def test_equal_type_nets_give_the_unsplit_numbers(name, type_one_side, tmp_path):
    src, split, type_map, sel, new_sel, rcut, cells = CASES[name]
    src = require(src)
    dst = write_system(src, tmp_path / name, split["splits"], split["type_map"], cells, max_frames=2)
    unsplit = load_system(src, type_map)
    unsplit = type(unsplit)(**{**unsplit.__dict__, **{k: getattr(unsplit, k)[:2] for k in ("coord", "box")}})
    relabelled = load_system(dst, split["type_map"])
    ncells = int(np.prod(cells))
    assert relabelled.natoms == ncells * unsplit.natoms and len(set(relabelled.atype.tolist())) == len(new_sel)

    hyper = _hyper(type_map, sel, rcut, type_one_side)
    new_hyper = _hyper(split["type_map"], new_sel, rcut, type_one_side)
    nnets = new_hyper.ntypes if type_one_side else new_hyper.ntypes**2
    assert net_groups.stack_nets("embedding", nnets) and net_groups.stack_nets("fitting", new_hyper.ntypes)
    params, stats = _random_model(hyper, seed=7)
    new_params, new_stats = _split_model(hyper, params, stats, new_hyper, old_type_of(split["splits"]))
    ref = _predict(hyper, params, stats, unsplit)
    assert float(np.max(np.abs(ref.force))) > 0.01  # forces that could differ
    plans = {"exact": None, "packed": _packed_plan(new_hyper, relabelled)}
    for path, plan_for in plans.items():
        got = _predict(new_hyper, new_params, new_stats, relabelled, plan_for)
        want = {  # the cells repeated: energy and virial × cells, forces repeated
            "energy": ncells * np.asarray(ref.energy),
            "force": np.tile(np.asarray(ref.force), (1, ncells, 1)),
            "virial": ncells * np.asarray(ref.virial),
        }
        for key, w in want.items():
            err = np.max(np.abs(np.asarray(getattr(got, key)) - w)) / np.max(np.abs(w))
            assert err <= 1e-10, f"{name} {path} {key}: max rel error {err:.2e}"


@pytest.fixture
def stacked_nets(monkeypatch):
    """Every model's nets stacked, whatever their number."""
    monkeypatch.setattr(net_groups, "MODE", "always")


@pytest.mark.parametrize("name", fixture_tests.FIXTURES)
def test_stacked_nets_match_deepmd_kit(name, stacked_nets):
    fixture_tests.test_matches_deepmd_kit(name, "float64", 1e-10)
    fixture_tests.test_per_type_capacity_is_exact(name)  # the fitting nets on blocks of max(capacity) atoms


def test_stacked_nets_match_deepmd_kit_in_float32(stacked_nets):
    fixture_tests.test_matches_deepmd_kit("water_pairnets", "float32", 1e-5)


@pytest.mark.parametrize("name,keep", pair_pack_tests.PACKED_CASES)
def test_stacked_packed_nets_match_deepmd_kit(name, keep, stacked_nets):
    pair_pack_tests.test_packed_matches_deepmd_kit(name, keep)


def test_stacked_packed_weight_gradient_is_the_nets_one_by_one(monkeypatch):
    """The training step's path (packed pairs, the slots past ``keep``, the empty slots' share from one row
    per type pair, per-type blocks): the weight gradient of a force + energy + virial loss with the nets
    stacked is the one with the nets one by one (one net per type pair)."""
    name = "water_pairnets"
    hyper, params, stats, p = load_fixture(name)
    spec, sizes, held = pair_pack_tests._tight_sizes(name, keep=True)
    coord, atype, box = jnp.asarray(p["coord"][:1]), jnp.asarray(p["atype"]), jnp.asarray(p["box"][:1])
    plan = ExecutionPlan(type_capacity([p["atype"]], hyper.ntypes), pack=sizes, keep=held, uniform_empty=True)

    def loss(q):
        nl = build(spec, coord, box, atype, order="any")
        pr = predict(hyper, q, Stats(*stats), coord, box, atype, nl, plan=plan)
        return jnp.sum(pr.force**2) + 1e-3 * jnp.sum(pr.energy**2) + jnp.sum(pr.virial**2)

    grads = {}
    for mode in ("always", "never"):
        monkeypatch.setattr(net_groups, "MODE", mode)
        grads[mode] = jax.jit(jax.value_and_grad(loss))(params)
    assert float(grads["always"][0]) == pytest.approx(float(grads["never"][0]), rel=1e-12)
    pairs = zip(jax.tree_util.tree_leaves_with_path(grads["always"][1]), jax.tree_util.tree_leaves(grads["never"][1]))
    for (path, a), b in pairs:
        assert max_rel(a, b) <= 1e-10, jax.tree_util.keystr(path)


def test_stacked_shared_pairs_change_no_number(stacked_nets):
    """The nets once per pair of same-type atoms, stacked: DeePMD-kit's numbers, the same weight gradient."""
    pair_pack_tests.test_shared_pairs_change_no_number("cu_virial")


def test_tile_layout_holds_each_kept_slot_once_in_its_nets_tiles():
    rng = np.random.default_rng(3)
    nf, m, nnets = 2, 50, 4
    net = jnp.asarray(rng.integers(0, nnets, (nf, m)))
    kept = jnp.asarray(rng.random((nf, m)) < 0.7)
    size, block = net_groups.tile_rows(40, nnets)
    assert size % block == 0 and size >= 40 + nnets * (block - 1)
    lay = net_groups.tile_layout(net, kept, nnets, size, block)
    for f in range(nf):
        rows, ok = np.asarray(lay.rows[f]), np.asarray(lay.row_ok[f])
        slots = np.flatnonzero(np.asarray(kept[f]))
        assert sorted(rows[ok].tolist()) == slots.tolist()  # every kept slot once
        np.testing.assert_array_equal(np.asarray(lay.slot_row[f])[slots] // 1, np.flatnonzero(ok)[np.argsort(rows[ok])])
        tile_of_row = np.arange(size) // block
        row_net = np.asarray(lay.tile_net[f])[tile_of_row]
        np.testing.assert_array_equal(row_net[ok], np.asarray(net[f])[rows[ok]])  # each row in its net's tile
        assert np.all(np.diff(np.asarray(lay.tile_net[f])) >= 0)  # nets' tiles in net order


def test_type_blocks_hold_each_atom_in_its_type_block():
    atype = jnp.asarray([[0, 2, 2, -1, 1, 2], [1, 1, 0, 2, 0, -1]])
    tb = net_groups.type_blocks(atype, 3, 3)
    for f in range(2):
        order, valid, inv = np.asarray(tb.order[f]), np.asarray(tb.valid[f]), np.asarray(tb.inv[f])
        real = np.asarray(atype[f]) >= 0
        np.testing.assert_array_equal(np.asarray(tb.real[f]), real)
        assert sorted(order[valid].tolist()) == np.flatnonzero(real).tolist()
        for i in np.flatnonzero(real):
            assert order[inv[i]] == i and inv[i] // 3 == int(atype[f, i])
