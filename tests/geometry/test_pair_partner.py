"""Each slot's reverse pair (geometry.pair_partner): checked against the lists themselves, on water (two
types, a box larger than 2 rcut), on small Cu cells (an atom sees several images of one neighbour, and
its own images) and on a list cut short by sel."""

import jax
import numpy as np
import pytest
from fixture_models import load_fixture

from jaxmd_dp.geometry.neighbor import allocate, build, holds_atoms_once
from jaxmd_dp.geometry.pair_partner import pair_partners, section_partners


def _lists(name, sel=None):
    hyper, _, _, p = load_fixture(name)
    sel = sel or hyper.sel
    spec = allocate(p["coord"], p.get("box"), hyper.rcut, sel)
    nl = jax.jit(lambda c, b, t: build(spec, c, b, t, order="any"))(p["coord"], p.get("box"), p["atype"])
    idx, shift = np.asarray(nl.idx), np.asarray(nl.shift).astype(int)
    part = np.asarray(jax.jit(pair_partners, static_argnums=3)(nl.idx, nl.shift, p["atype"], tuple(sel)))
    return idx, shift, np.asarray(p["atype"]), part, tuple(sel), np.asarray(nl.nneigh)


@pytest.mark.parametrize("name", ["water_se_e2_a", "cu_virial"])
def test_partners_are_the_reverse_pairs(name):
    idx, shift, atype, part, sel, _ = _lists(name)
    nf, n, nnei = idx.shape
    for f in range(nf):
        for i in range(n):
            for k in np.flatnonzero(idx[f, i] >= 0):
                j = idx[f, i, k]
                q = part[f, i, k]
                if atype[j] != atype[i]:
                    assert q == -1  # different types: different nets and statistics, nothing shared
                    continue
                assert q >= 0, (f, i, k)  # a full list: every same-type pair is in both atoms' lists
                jj, kk = divmod(int(q), nnei)
                assert jj == j and idx[f, jj, kk] == i and np.array_equal(shift[f, jj, kk], -shift[f, i, k])
        flat = part[f].reshape(-1)
        has = flat >= 0
        assert np.array_equal(flat[flat[has]], np.flatnonzero(has))  # an involution
        assert np.all(part[f][idx[f] < 0] == -1)
    if name == "cu_virial":  # small cells: some atom holds two images of one neighbour
        assert any(
            len(set(idx[f, i][idx[f, i] >= 0].tolist())) < int((idx[f, i] >= 0).sum())
            for f in range(nf)
            for i in range(n)
        )


def test_partners_of_a_list_cut_short_by_sel():
    """sel below the neighbour count: the nearest are kept, so some pairs are in one atom's list only;
    those have no partner, and the others still pair up."""
    hyper, _, _, _ = load_fixture("cu_virial")
    cut = (int(hyper.sel[0]) // 4,)
    idx, shift, atype, part, sel, nneigh = _lists("cu_virial", cut)
    assert int(nneigh.max()) > cut[0]
    flat = part.reshape(part.shape[0], -1)
    has = flat >= 0
    assert 0 < has.sum() < (idx >= 0).sum()
    for f in range(flat.shape[0]):
        assert np.array_equal(flat[f][flat[f][has[f]]], np.flatnonzero(has[f]))


def test_section_partners_index_the_section():
    idx, _, atype, part, sel, _ = _lists("water_se_e2_a")
    nnei = sum(sel)
    a, b = sel[0], sel[0] + sel[1]  # the H section
    sp = np.asarray(section_partners(part[:, :, a:b], nnei, a, b - a))
    full = part[:, :, a:b].reshape(part.shape[0], -1)
    want = np.where(full >= 0, (full // nnei) * (b - a) + full % nnei - a, -1)
    assert np.array_equal(sp, want)
    assert np.all((sp < 0) | ((sp % (b - a)) < (b - a)))
    assert (sp >= 0).any()


@pytest.mark.parametrize("name,cut", [("water_se_e2_a", False), ("water_se_e2_a", True), ("cu_virial", False)])
def test_table_path_is_the_search(name, cut):
    """The atoms × atoms table (lists holding no atom twice) gives the search's partners, also on a list cut
    short by sel; on small Cu cells (an atom holds two images of a neighbour) it says it does not apply."""
    from jaxmd_dp.geometry.pair_partner import _partners_by_search, _partners_by_table

    hyper, _, _, p = load_fixture(name)
    sel = tuple(max(1, s // 3) for s in hyper.sel) if cut else tuple(hyper.sel)
    spec = allocate(p["coord"], p.get("box"), hyper.rcut, sel)
    nl = jax.jit(lambda c, b, t: build(spec, c, b, t, order="any"))(p["coord"], p.get("box"), p["atype"])
    atype = np.broadcast_to(p["atype"], nl.idx.shape[:2])
    if cut:
        assert int(np.asarray(nl.nneigh).max()) > min(sel)
    table, unique = jax.jit(_partners_by_table, static_argnums=3)(nl.idx, nl.shift, atype, sel)
    search = jax.jit(_partners_by_search, static_argnums=3)(nl.idx, nl.shift, atype, sel)
    assert bool(unique) == name.startswith("water")
    if bool(unique):
        np.testing.assert_array_equal(np.asarray(table), np.asarray(search))
        assert (np.asarray(search) >= 0).any()


def test_lists_known_to_hold_atoms_once_skip_the_search():
    """Water's minimum-image spec (a box wider than 2 rcut) and a spec without periodic boundaries hold
    each atom once; small Cu cells (several images of a neighbour) and cell lists are not known to. Where
    they are, ``once=True`` gives the same partners from the table alone, with no search or run-time choice
    in the program."""
    hyper, _, _, p = load_fixture("water_se_e2_a")
    sel = tuple(hyper.sel)
    spec = allocate(p["coord"], p["box"], hyper.rcut, sel)
    assert spec.method == "minimage" and holds_atoms_once(spec)
    assert holds_atoms_once(allocate(p["coord"], None, hyper.rcut, sel))
    assert not holds_atoms_once(allocate(p["coord"], p["box"], hyper.rcut, sel, method="cell"))
    cu, _, _, pc = load_fixture("cu_virial")
    assert not holds_atoms_once(allocate(pc["coord"], pc["box"], cu.rcut, tuple(cu.sel)))
    nl = jax.jit(lambda c, b, t: build(spec, c, b, t, order="any"))(p["coord"], p["box"], p["atype"])
    fn = jax.jit(pair_partners, static_argnums=(3, 4))
    once = np.asarray(fn(nl.idx, nl.shift, p["atype"], sel, True))
    np.testing.assert_array_equal(once, np.asarray(fn(nl.idx, nl.shift, p["atype"], sel, False)))
    assert (once >= 0).any()
    text = {o: fn.lower(nl.idx, nl.shift, p["atype"], sel, o).as_text() for o in (False, True)}
    assert "stablehlo.case" in text[False] and "stablehlo.case" not in text[True]
