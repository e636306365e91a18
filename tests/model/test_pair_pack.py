"""Embedding nets on real pairs only (model.fast.pair_pack) give the dense model's numbers: DeePMD-kit's
fixtures to 1e-10 with the tightest block sizes, and the same weight gradient through the forces. Also
with the neighbour list cut to the slots an atom fills (``keep``), the rest counted as empty slots."""

import jax
import jax.numpy as jnp
import jax.test_util  # noqa: F401  (check_grads)
import numpy as np
import pytest
from fixture_models import FIXTURES, load_fixture, max_rel

from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.model.energy import Stats, predict
from jaxmd_dp.model.fast.pair_pack import (
    PACK_MAX_FILL,
    keep_sizes,
    kept_slots,
    pack_index,
    pack_maps,
    pack_sizes,
    pair_counts,
    take,
    uniform_empty,
)
from jaxmd_dp.model.plan import ExecutionPlan


def pack(x, idx, inv, mask, valid):
    return take(x, ((idx, valid),), ((inv, mask),))


def unpack(y, idx, inv, mask, valid):
    return take(y, ((inv, mask),), ((idx, valid),))


def test_pack_index_and_transpose():
    """idx and inv are inverse on real slots; pack and unpack are each other's transpose."""
    rng = np.random.default_rng(0)
    mask = jnp.asarray(rng.random((3, 40)) < 0.6)
    size = int(mask.sum(-1).max()) + 3
    idx, inv = pack_index(mask, size)
    count = np.asarray(mask.sum(-1))
    valid = jnp.arange(size) < mask.sum(-1, keepdims=True)
    for f in range(3):
        real = np.flatnonzero(np.asarray(mask[f]))
        assert np.asarray(idx[f, : count[f]]).tolist() == real.tolist()
        assert np.asarray(inv[f, real]).tolist() == list(range(count[f]))
    x = jnp.asarray(rng.normal(size=(3, 40, 5)))
    y = jnp.asarray(rng.normal(size=(3, size, 5)))
    lhs = jnp.vdot(pack(x, idx, inv, mask, valid), y)
    rhs = jnp.vdot(x, unpack(y, idx, inv, mask, valid))
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-12)
    # the custom VJPs are those transposes, to first and second order
    g = jax.grad(lambda x: jnp.sum(jnp.sin(pack(x, idx, inv, mask, valid)) * y))(x)
    want = unpack(jnp.cos(pack(x, idx, inv, mask, valid)) * y, idx, inv, mask, valid)
    np.testing.assert_allclose(g, want, rtol=1e-12)
    jax.test_util.check_grads(lambda y: jnp.sum(unpack(y, idx, inv, mask, valid) ** 3), (y,), order=2, modes=["rev"])


def test_pack_sizes_rule():
    assert pack_sizes([10, 61], 4, (8, 32)) == (16, 64)  # rounded up to 8
    assert pack_sizes([40, 5], 4, (8, 32)) == (32, 8)  # at most the section, at least 8 rows
    assert pack_sizes([32, 128], 4, (8, 32)) is None  # every slot full: no packing
    n, sel = 10, (10, 10)
    fill = int(PACK_MAX_FILL * n * sum(sel)) // 2
    assert pack_sizes([fill - 8, fill - 8], n, sel) is not None and pack_sizes([n * 10, 8], n, sel) is not None


def test_keep_sizes_rule():
    assert keep_sizes([38, 71], (46, 92)) == (40, 72)  # rounded up to 8
    assert keep_sizes([0, 100], (46, 92)) == (8, 92)  # at least 8 slots, at most sel
    assert kept_slots((4, 6), (2, 3)).tolist() == [0, 1, 4, 5, 6]


def _tight_sizes(name, keep=False):
    """Block sizes = the most real pairs of each type in any fixture frame (no head-room); with ``keep``
    a spec holding only the most neighbours of each type any atom has (no rounding), and that keep."""
    hyper, _, _, p = load_fixture(name)
    box = p.get("box")
    spec = allocate(p["coord"], box, hyper.rcut, hyper.sel)
    nl = build(
        spec, jnp.asarray(p["coord"]), None if box is None else jnp.asarray(box), jnp.asarray(p["atype"]), order="any"
    )
    counts = np.asarray(pair_counts(nl.idx >= 0, hyper.sel)).max(axis=0)
    sizes = tuple(max(1, int(c)) for c in counts)
    if not keep:
        return spec, sizes, None
    held = tuple(max(1, int(c)) for c in np.asarray(nl.nneigh).max(axis=(0, 1)))
    assert sum(held) < hyper.nnei  # the fixture leaves slots empty for every atom: the cut is exercised
    return allocate(p["coord"], box, hyper.rcut, held), sizes, held


# each fixture once, with or without the cut, to bound the compiles
PACKED_CASES = [("water_se_e2_a", True), ("water_pairnets", False), ("cu_virial", True), ("nopbc_cho", False)]
assert sorted(n for n, _ in PACKED_CASES) == sorted(FIXTURES)


@pytest.mark.parametrize("name,keep", PACKED_CASES)
def test_packed_matches_deepmd_kit(name, keep):
    hyper, params, stats, p = load_fixture(name)
    spec, sizes, held = _tight_sizes(name, keep)
    natoms = p["coord"].shape[1]
    assert sum(sizes) < natoms * hyper.nnei  # the fixture leaves slots empty: packing is exercised
    box = p.get("box")

    @jax.jit
    def run(coord, box, atype):
        nl = build(spec, coord, box, atype, order="any")
        return predict(hyper, params, Stats(*stats), coord, box, atype, nl, plan=ExecutionPlan(pack=sizes, keep=held))

    out = run(jnp.asarray(p["coord"]), None if box is None else jnp.asarray(box), jnp.asarray(p["atype"]))
    for key in ("energy", "force", "virial", "atom_energy"):
        err = max_rel(getattr(out, key), p[key])
        assert err <= 1e-10, f"{name} packed {key}: max rel error {err:.2e}"


@pytest.mark.parametrize("name", ["water_pairnets", "cu_virial"])
def test_packed_weight_gradient_through_forces(name):
    """The training gradient (∂/∂weights of a force + energy loss) is the dense one: the packing's
    custom derivatives are right to second order. Statistics with per-slot davg make the empty rows
    differ by centre type and slot (the slots past ``keep`` included)."""
    hyper, params, stats, p = load_fixture(name)
    spec, sizes, held = _tight_sizes(name, keep=True)
    dense_spec = allocate(p["coord"], p["box"], hyper.rcut, hyper.sel)
    rng = np.random.default_rng(1)
    davg = np.asarray(stats[0]) + rng.normal(0, 0.05, np.shape(stats[0]))
    st = Stats(davg, np.asarray(stats[1]), np.asarray(stats[2]))
    coord, atype = jnp.asarray(p["coord"][:1]), jnp.asarray(p["atype"])
    box = jnp.asarray(p["box"][:1])

    def loss(params, spec, pack_sizes, held):
        nl = build(spec, coord, box, atype, order="any")
        pr = predict(hyper, params, st, coord, box, atype, nl, plan=ExecutionPlan(pack=pack_sizes, keep=held))
        return jnp.sum(pr.force**2) + 1e-3 * jnp.sum(pr.energy**2) + jnp.sum(pr.virial**2)

    dense = jax.jit(jax.value_and_grad(lambda q: loss(q, dense_spec, None, None)))(params)
    packed = jax.jit(jax.value_and_grad(lambda q: loss(q, spec, sizes, held)))(params)
    assert float(packed[0]) == pytest.approx(float(dense[0]), rel=1e-12)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(packed[1]), jax.tree_util.tree_leaves(dense[1])):
        assert max_rel(a, b) <= 1e-10, jax.tree_util.keystr(path)


@pytest.mark.parametrize("name", ["water_se_e2_a", "water_pairnets"])
def test_uniform_empty_rows_change_no_number(name):
    """DeePMD-kit's statistics hold one empty row per neighbour type's section (``uniform_empty``); the
    empty slots' share computed from that row gives the dense model's energy, forces, virial and training
    gradient (centre types as an array with type_one_side, one int per centre type without)."""
    hyper, params, stats, p = load_fixture(name)
    assert uniform_empty(stats[0], stats[1], hyper.sel)
    davg = np.array(stats[0])
    davg[0, 1, 0] += 0.01  # one slot's row differs: the check says so
    assert not uniform_empty(davg, stats[1], hyper.sel)
    spec, sizes, held = _tight_sizes(name, keep=True)
    dense_spec = allocate(p["coord"], p["box"], hyper.rcut, hyper.sel)
    st = Stats(*stats)
    coord, atype, box = jnp.asarray(p["coord"][:1]), jnp.asarray(p["atype"]), jnp.asarray(p["box"][:1])

    def loss(params, spec, pack_sizes, held, table, uniform):
        nl = build(spec, coord, box, atype, order="any")
        pr = predict(
            hyper,
            params,
            st,
            coord,
            box,
            atype,
            nl,
            plan=ExecutionPlan(pack=pack_sizes, keep=held, table=table, uniform_empty=uniform),
        )
        return jnp.sum(pr.force**2) + 1e-3 * jnp.sum(pr.energy**2) + jnp.sum(pr.virial**2), pr

    dense = jax.jit(jax.value_and_grad(lambda q: loss(q, dense_spec, None, None, 0, False), has_aux=True))(params)
    for sizes_, table in ((sizes, 0), (None, 1024)):  # packed nets, and the node table (training's paths)
        ref = jax.jit(jax.value_and_grad(lambda q: loss(q, spec, sizes_, held, table, False), has_aux=True))(params)
        got = jax.jit(jax.value_and_grad(lambda q: loss(q, spec, sizes_, held, table, True), has_aux=True))(params)
        for key in ("energy", "force", "virial"):
            assert max_rel(getattr(got[0][1], key), getattr(ref[0][1], key)) <= 1e-10, (table, key)
        for a, b in zip(jax.tree_util.tree_leaves(got[1]), jax.tree_util.tree_leaves(ref[1])):
            assert max_rel(a, b) <= 1e-10, table
        if not table:  # the exact nets: DeePMD-kit's numbers
            for key in ("energy", "force", "virial"):
                assert max_rel(getattr(got[0][1], key), getattr(dense[0][1], key)) <= 1e-10, key


def test_shared_take_maps_are_transposes():
    """With partners, the two maps of a packed block (:func:`pack_maps`: one row per pair, both slots
    read it) are each other's transpose, and their custom VJPs are those transposes to second order."""
    rng = np.random.default_rng(2)
    m = 40
    mask = np.zeros((2, m), bool)
    partner = np.full((2, m), -1)
    for f in range(2):
        slots = rng.permutation(m)[:30]
        mask[f, slots] = True
        for a, b in slots[:20].reshape(-1, 2):  # ten pairs, ten slots without a partner
            partner[f, a], partner[f, b] = b, a
    mask, partner = jnp.asarray(mask), jnp.asarray(partner)
    size = 22  # 10 pairs + 10 single slots + 2 spare rows
    to_rows, to_slots = pack_maps(mask, size, partner)
    x = jnp.asarray(rng.normal(size=(2, m, 3)))
    y = jnp.asarray(rng.normal(size=(2, size, 3)))
    for (fwd, bwd), a_in, b_in in ((to_rows, x, y), (to_slots, y, x)):  # <take(a, fwd), b> = <a, take(b, bwd)>
        lhs = jnp.vdot(take(a_in, fwd, bwd), b_in)
        assert float(lhs) == pytest.approx(float(jnp.vdot(a_in, take(b_in, bwd, fwd))), rel=1e-12)
    rows = take(x, *to_rows)
    assert int(jnp.sum(jnp.any(rows != 0, axis=-1))) == 2 * 20  # 20 rows used per frame
    spread = take(y, *to_slots)
    for f in range(2):  # both slots of a pair hold their row's value; empty slots 0
        for s in np.flatnonzero(np.asarray(partner[f]) >= 0):
            np.testing.assert_array_equal(spread[f, s], spread[f, int(partner[f, s])])
        assert not np.any(np.asarray(spread[f])[~np.asarray(mask[f])])
    jax.test_util.check_grads(lambda y: jnp.sum(take(y, *to_slots) ** 3), (y,), order=2, modes=["rev"])
    jax.test_util.check_grads(lambda x: jnp.sum(take(x, *to_rows) ** 3), (x,), order=2, modes=["rev"])


@pytest.mark.parametrize("name", ["water_se_e2_a", "cu_virial"])
def test_shared_pairs_change_no_number(name):
    """The nets run once per pair of same-type atoms (partners of the list, blocks for the pairs kept):
    energy, forces, virial and the weight gradient of a force + energy + virial loss are those of one
    row per real pair to rounding, and so DeePMD-kit's. Cu: half the rows."""
    from jaxmd_dp.geometry.pair_partner import pair_partners, section_partners

    hyper, params, stats, p = load_fixture(name)
    spec, sizes, held = _tight_sizes(name, keep=True)
    st = Stats(*stats)
    coord, atype = jnp.asarray(p["coord"]), jnp.asarray(p["atype"])
    box = jnp.asarray(p["box"])
    nl = jax.jit(lambda c, b: build(spec, c, b, atype, order="any"))(coord, box)
    partner = pair_partners(nl.idx, nl.shift, atype, held)
    sec = np.concatenate([[0], np.cumsum(held)])
    kept = []
    for t in range(len(held)):
        sp = section_partners(partner[:, :, sec[t] : sec[t + 1]], sum(held), int(sec[t]), held[t])
        m = (nl.idx[:, :, sec[t] : sec[t + 1]] >= 0).reshape(sp.shape)
        kept.append(int(jnp.sum(m & ((sp < 0) | (jnp.arange(sp.shape[1]) < sp)), axis=-1).max()))
    assert all(k < s for k, s in zip(kept, sizes))
    if name == "cu_virial":
        assert 2 * kept[0] <= sizes[0] + 1

    def run(pk, pt):
        return predict(
            hyper,
            params,
            st,
            coord,
            box,
            atype,
            nl,
            plan=ExecutionPlan(pack=pk, keep=held, uniform_empty=True, partner=pt),
        )

    one, shared = jax.jit(lambda: run(sizes, None))(), jax.jit(lambda: run(tuple(kept), partner))()
    for key in ("energy", "force", "virial", "atom_energy"):
        assert max_rel(getattr(shared, key), getattr(one, key)) <= 1e-12, key
        assert max_rel(getattr(shared, key), p[key]) <= 1e-10, key

    def loss(q, pk, pt):
        sl = lambda x: x[:1]  # noqa: E731
        pr = predict(
            hyper,
            q,
            st,
            sl(coord),
            sl(box),
            atype,
            jax.tree_util.tree_map(sl, nl._replace(cell_overflow=None)),
            plan=ExecutionPlan(pack=pk, keep=held, uniform_empty=True, partner=None if pt is None else sl(pt)),
        )
        return jnp.sum(pr.force**2) + 1e-3 * jnp.sum(pr.energy**2) + jnp.sum(pr.virial**2)

    ga = jax.jit(jax.grad(lambda q: loss(q, sizes, None)))(params)
    gb = jax.jit(jax.grad(lambda q: loss(q, tuple(kept), partner)))(params)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(gb), jax.tree_util.tree_leaves(ga)):
        assert max_rel(a, b) <= 1e-10, jax.tree_util.keystr(path)


def test_partners_need_one_net_per_neighbour_type():
    hyper, params, stats, p = load_fixture("water_pairnets")
    spec, sizes, held = _tight_sizes("water_pairnets", keep=True)
    coord, atype, box = jnp.asarray(p["coord"][:1]), jnp.asarray(p["atype"]), jnp.asarray(p["box"][:1])
    nl = build(spec, coord, box, atype, order="any")
    with pytest.raises(ValueError, match="type_one_side"):
        predict(
            hyper,
            params,
            Stats(*stats),
            coord,
            box,
            atype,
            nl,
            plan=ExecutionPlan(pack=sizes, keep=held, uniform_empty=True, partner=jnp.full(nl.idx.shape, -1)),
        )
