"""Neighbour lists (``jaxmd_dp.geometry.neighbor``) against an independent brute-force numpy reference.

The reference enumerates every atom pair in every periodic image that can possibly be in reach of
the *unwrapped* coordinates, keeps d = r_j − r_i + n·box with |d| < rcut (i itself at n = 0 excluded,
padding atoms excluded), and sorts the neighbours of each type by distance. ``build`` must give, per
centre atom and per type group: the same set of (j, n) as the reference's nearest ``sel[t]``, nearest
first, empty slots (−1, shift 0) at the end of the group, and ``nneigh`` = the full count in reach.
All three methods ("brute", "cell" and "minimage") are checked on every geometry.
"""

from __future__ import annotations

import functools
import itertools

import jax
import numpy as np
import pytest

from jaxmd_dp.geometry.neighbor import allocate, build, candidates_per_atom, fits, inverse_box, search_offsets

METHODS = ("brute", "cell", "minimage")


# ----------------------------------------------------------------------------------------------------
# independent reference
# ----------------------------------------------------------------------------------------------------


def _face_widths(box: np.ndarray) -> np.ndarray:
    """Distance between opposite faces of the cell spanned by the rows of ``box`` (3,)."""
    recip = np.linalg.inv(box)  # columns are the reciprocal vectors: frac = r @ recip
    return 1.0 / np.linalg.norm(recip, axis=0)


def reference_pairs(coord, box, atype, rcut):
    """All pairs in reach: arrays (i, j, n (npair, 3) int, r), sorted by (i, type of j, r).

    coord: (natoms, 3) unwrapped; box: (3, 3) rows are cell vectors, or None; atype: (natoms,), −1 = padding.
    """
    coord = np.asarray(coord, np.float64)
    atype = np.asarray(atype)
    real = np.flatnonzero(atype >= 0)
    c = coord[real]
    dr = c[None, :, :] - c[:, None, :]  # (centre, neighbour, 3)
    if box is None:
        base = np.zeros(dr.shape, np.int64)
        ranges = [range(1)] * 3
        box = np.zeros((3, 3))
    else:
        box = np.asarray(box, np.float64)
        # the component of d = dr + n·box along reciprocal vector a is (Δfrac_a + n_a)·width_a,
        # so a pair is in reach through image n only if −Δfrac_a − x_a < n_a < −Δfrac_a + x_a,
        # x_a = rcut / width_a: at most ceil(2 x_a) integers, the first one floor(−Δfrac_a − x_a) + 1.
        x = rcut / _face_widths(box)
        dfrac = dr @ np.linalg.inv(box)
        base = np.floor(-dfrac - x).astype(np.int64) + 1
        ranges = [range(int(np.ceil(2 * xa)) + 1) for xa in x]  # + 1: generous
    I, J, N, R = [], [], [], []
    ii0, jj0 = np.meshgrid(np.arange(len(real)), np.arange(len(real)), indexing="ij")
    for k in itertools.product(*ranges):
        n = base + np.asarray(k)  # (centre, neighbour, 3) image of each pair
        d = dr + n @ box
        r = np.sqrt(np.sum(d * d, axis=-1))
        ok = (r < rcut) & ~((ii0 == jj0) & np.all(n == 0, axis=-1))
        I.append(real[ii0[ok]])
        J.append(real[jj0[ok]])
        N.append(n[ok])
        R.append(r[ok])
    I, J, N, R = np.concatenate(I), np.concatenate(J), np.concatenate(N), np.concatenate(R)
    # one (j, n) may be generated twice by overlapping ranges: keep it once
    _, first = np.unique(np.column_stack([I, J, N]), axis=0, return_index=True)
    I, J, N, R = I[first], J[first], N[first], R[first]
    order = np.lexsort((R, atype[J], I))
    return I[order], J[order], N[order], R[order]


# ----------------------------------------------------------------------------------------------------
# comparison
# ----------------------------------------------------------------------------------------------------


def _rank_in_group(key):
    """Position of each element inside its run of equal (sorted) keys."""
    start = np.concatenate([[True], key[1:] != key[:-1]])
    first = np.maximum.accumulate(np.where(start, np.arange(len(key)), 0))
    return np.arange(len(key)) - first


def check_frame(nl, f, coord, box, atype, rcut, sel, tie_tol=1e-9):
    """Compare frame ``f`` of a built list with the reference (vectorised over atoms and slots)."""
    coord = np.asarray(coord, np.float64)
    atype = np.asarray(atype)
    ntypes, natoms, nnei = len(sel), coord.shape[0], sum(sel)
    idx = np.asarray(nl.idx[f])
    shift_f = np.asarray(nl.shift[f], np.float64)
    nneigh = np.asarray(nl.nneigh[f])
    assert idx.shape == (natoms, nnei) and shift_f.shape == (natoms, nnei, 3)
    assert nneigh.shape == (natoms, ntypes)
    shift = np.rint(shift_f).astype(np.int64)
    assert np.array_equal(shift, shift_f), "shifts must be integral"
    boxm = np.zeros((3, 3)) if box is None else np.asarray(box, np.float64)
    sel_a = np.asarray(sel)
    sec = np.concatenate([[0], np.cumsum(sel)])
    group = np.repeat(np.arange(ntypes), sel)  # (nnei,) type group of each slot
    pos = np.arange(nnei) - sec[group]  # position inside the group

    # reference: full counts, and the nearest sel[t] of every group
    I, J, N, R = reference_pairs(coord, box, atype, rcut)
    T = atype[J]
    ref_count = np.zeros((natoms, ntypes), np.int64)
    np.add.at(ref_count, (I, T), 1)
    np.testing.assert_array_equal(nneigh, ref_count, err_msg=f"frame {f}: nneigh (true count per type)")

    # filled slots: exactly the first min(count, sel) of each group, the rest empty with zero shift
    nfill = np.minimum(ref_count, sel_a)  # (natoms, ntypes)
    expect_filled = pos[None, :] < nfill[:, group]
    bad = np.argwhere((idx >= 0) != expect_filled)
    assert len(bad) == 0, f"frame {f}: filled/empty slots wrong at (atom, slot) {bad[:5].tolist()}"
    assert np.all(shift[~expect_filled] == 0), f"frame {f}: empty slots with non-zero shift"
    bi, bs = np.nonzero(expect_filled)
    bj, bn, bt = idx[bi, bs], shift[bi, bs], group[bs]
    assert np.all(atype[bj] == bt), f"frame {f}: neighbour of the wrong type in a group"
    d = coord[bj] - coord[bi] + bn @ boxm
    br = np.sqrt(np.sum(d * d, axis=-1))
    # nearest first inside each group (rows of bi, bs are in slot order)
    same = (bi[1:] == bi[:-1]) & (bt[1:] == bt[:-1])
    dec = np.flatnonzero(same & (np.diff(br) < -1e-12))
    assert len(dec) == 0, f"frame {f}: not nearest first at atom {bi[dec[:5]].tolist()}"

    # kept sets: the built (i, t, j, n) rows must equal the reference's nearest sel[t] per group
    keep = _rank_in_group(I * ntypes + T) < sel_a[T]
    ref_rows = np.column_stack([I, T, J, N])[keep]
    got_rows = np.column_stack([bi, bt, bj, bn])
    got_sorted = got_rows[np.lexsort(got_rows.T[::-1])]
    assert not np.any(np.all(got_sorted[1:] == got_sorted[:-1], axis=1)), f"frame {f}: duplicated (j, shift)"
    # groups truncated exactly at a distance tie (e.g. the ± images of one atom) may keep either of them
    rank = _rank_in_group(I * ntypes + T)
    at_cut = np.flatnonzero((rank == sel_a[T]) & (rank > 0))  # first dropped element of a group
    tie = at_cut[R[at_cut] - R[at_cut - 1] < tie_tol]
    tie_groups = {(int(I[k]), int(T[k])) for k in tie}
    if tie_groups:
        in_tie_ref = np.array([(a, b) in tie_groups for a, b in ref_rows[:, :2]], bool)
        in_tie_got = np.array([(a, b) in tie_groups for a, b in got_rows[:, :2]], bool)
        allowed = {tuple(r) for r in np.column_stack([I, T, J, N])}
        assert all(tuple(r) in allowed for r in got_rows[in_tie_got]), f"frame {f}: tie group holds a non-neighbour"
        for a, b in tie_groups:
            sel_ref = np.sort(R[(I == a) & (T == b)])[: sel[b]]
            sel_got = np.sort(br[(bi == a) & (bt == b)])
            np.testing.assert_allclose(sel_got, sel_ref, rtol=0, atol=1e-9, err_msg=f"frame {f} tie group {a, b}")
        ref_rows, got_rows = ref_rows[~in_tie_ref], got_rows[~in_tie_got]
    ref_sorted = ref_rows[np.lexsort(ref_rows.T[::-1])]
    got_sorted = got_rows[np.lexsort(got_rows.T[::-1])]
    if ref_sorted.shape != got_sorted.shape or not np.array_equal(ref_sorted, got_sorted):
        ref_set, got_set = set(map(tuple, ref_sorted.tolist())), set(map(tuple, got_sorted.tolist()))
        raise AssertionError(
            f"frame {f}: kept neighbours differ from the reference's nearest sel[t]; (i, t, j, n) "
            f"missing {sorted(ref_set - got_set)[:5]}, extra {sorted(got_set - ref_set)[:5]}"
        )


def check_all(nl, coord, box, atype, rcut, sel):
    coord = np.asarray(coord)
    atype = np.broadcast_to(np.asarray(atype), coord.shape[:2])
    assert not bool(nl.cell_overflow)
    for f in range(coord.shape[0]):
        check_frame(nl, f, coord[f], None if box is None else np.asarray(box)[f], atype[f], rcut, sel)


@functools.cache
def _jit_build(spec):
    return jax.jit(functools.partial(build, spec))


def build_with(method, coord, box, atype, rcut, sel, **kw):
    spec = allocate(coord, box, rcut, sel, method=method, **kw)
    if box is not None:
        assert spec.method == method
    return spec, _jit_build(spec)(coord, box, atype)


# ----------------------------------------------------------------------------------------------------
# geometries
# ----------------------------------------------------------------------------------------------------


def random_triclinic_box(rng, L, tilt=0.45):
    """Random cell vectors (rows) with sizeable tilts, positive determinant."""
    while True:
        box = np.diag(rng.uniform(0.85, 1.15, 3) * L) + rng.uniform(-tilt, tilt, (3, 3)) * L * (1 - np.eye(3))
        if np.linalg.det(box) > 0.3 * L**3:
            return box


def random_types(rng, natoms, ntypes=2):
    t = rng.integers(0, ntypes, natoms)
    t[:ntypes] = np.arange(ntypes)  # every type present
    return rng.permutation(t)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("sel", [(40, 60), (5, 9)], ids=["sel_ample", "sel_tight"])
def test_random_triclinic_unwrapped(method, seed, sel):
    """Random triclinic boxes, 2 types, 60–150 atoms, coordinates up to a box length outside the cell."""
    rng = np.random.default_rng(seed)
    natoms = int(rng.integers(60, 151))
    nframes = 3
    rcut = 3.7
    L = (natoms / 0.09) ** (1 / 3)
    box = np.stack([random_triclinic_box(rng, L) for _ in range(nframes)])
    frac = rng.uniform(0.0, 1.0, (nframes, natoms, 3))
    frac[:, : natoms // 2] += rng.integers(-1, 2, (nframes, natoms // 2, 3))  # half of them unwrapped
    coord = np.einsum("fni,fij->fnj", frac, box)
    atype = random_types(rng, natoms)
    spec, nl = build_with(method, coord, box, atype, rcut, sel)
    if method == "cell":
        assert np.prod(spec.ncell) >= 2, spec  # the test must exercise a real cell grid
    check_all(nl, coord, box, atype, rcut, sel)
    if sel == (5, 9):
        assert np.any(np.asarray(nl.nneigh) > np.asarray(sel)), "tight sel should overflow somewhere"


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "L,rcut,natoms",
    [(5.0, 3.0, 7), (3.0, 4.0, 5), (2.5, 6.1, 1)],
    ids=["rcut>L/2", "rcut>L", "one_atom_rcut>2L"],
)
def test_small_boxes_many_images(method, L, rcut, natoms):
    """rcut > L/2 and rcut > L: several images of the same atom (and of the centre itself) are neighbours."""
    rng = np.random.default_rng(int(L * 10 + natoms))
    box = np.stack([random_triclinic_box(rng, L, tilt=0.3), np.diag([L, 1.1 * L, 0.95 * L])])
    frac = rng.uniform(-0.7, 1.7, (2, natoms, 3))
    coord = np.einsum("fni,fij->fnj", frac, box)
    atype = random_types(rng, natoms) if natoms > 1 else np.array([1])
    # ample sel: every image in reach is kept
    nmax = int(4 / 3 * np.pi * rcut**3 / (L**3 * 0.3) * natoms) + 10
    sel = (nmax, nmax)
    spec, nl = build_with(method, coord, box, atype, rcut, sel)
    check_all(nl, coord, box, atype, rcut, sel)
    idx = np.asarray(nl.idx)
    # the same atom appears several times in one row (different images)
    counts = [np.bincount(row[row >= 0], minlength=natoms).max() for row in idx.reshape(-1, idx.shape[-1])]
    assert max(counts) >= 2
    if natoms == 1:  # a lone atom sees only its own images, which come in ± pairs
        assert np.all(np.asarray(nl.nneigh)[..., 1] % 2 == 0) and np.all(np.asarray(nl.nneigh)[..., 1] > 0)
    if rcut < L:
        return
    # with a tight sel the nearest images are kept (ties between the ± images of one atom are common)
    tight = (2, 3)
    _, nl2 = build_with(method, coord, box, atype, rcut, tight)
    check_all(nl2, coord, box, atype, rcut, tight)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("sel", [(30, 30), (3, 4)])
def test_no_pbc_cluster(method, sel):
    rng = np.random.default_rng(7)
    natoms = 25
    coord = rng.normal(0.0, 2.2, (2, natoms, 3)) + np.array([100.0, -40.0, 3.0])  # far from the origin
    atype = random_types(rng, natoms)
    rcut = 4.0
    spec = allocate(coord, None, rcut, sel, method=method)
    assert not spec.pbc
    nl = _jit_build(spec)(coord, None, atype)
    check_all(nl, coord, None, atype, rcut, sel)
    assert np.all(np.asarray(nl.shift) == 0)


@pytest.mark.parametrize("method", METHODS)
def test_perfect_crystal_ties_and_cell_faces(method):
    """fcc lattice: atoms exactly on cell faces (frac 0, 0.5; a few at −1e-17, which wraps to frac 1.0
    in floating point) and whole shells of equidistant neighbours; a tight sel cuts through a shell."""
    a, reps, rcut = 3.615, 4, 5.0  # shells 2.56 (12), 3.62 (6), 4.43 (24): 42 neighbours within rcut
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    cells = np.array(list(itertools.product(range(reps), repeat=3)))
    coord = ((cells[:, None, :] + basis[None]).reshape(-1, 3) * a)[None]
    coord[0, :3] -= 1e-17  # exactly-on-the-face atoms just below zero
    coord[0, 5] += reps * a * np.array([1, -1, 0])  # and one unwrapped
    box = np.diag([reps * a] * 3)[None]
    atype = np.zeros(coord.shape[1], int)
    for sel in [(60,), (16,)]:
        spec, nl = build_with(method, coord, box, atype, rcut, sel)
        if method == "cell":
            assert spec.ncell == (2, 2, 2)
        check_all(nl, coord, box, atype, rcut, sel)
        assert np.all(np.asarray(nl.nneigh) == 42)


@pytest.mark.parametrize("method", METHODS)
def test_overflowing_sel(method):
    """Dense system, small sel: nneigh reports the true count, the kept ones are the nearest sel[t]."""
    rng = np.random.default_rng(11)
    natoms = 80
    box = random_triclinic_box(rng, 9.0, tilt=0.3)[None]
    coord = rng.uniform(0, 1, (1, natoms, 3)) @ box
    atype = random_types(rng, natoms)
    rcut, sel = 4.2, (4, 6)
    _, nl = build_with(method, coord, box, atype, rcut, sel)
    nneigh = np.asarray(nl.nneigh)
    assert np.all(nneigh > np.asarray(sel)), "every atom should overflow in this dense system"
    check_all(nl, coord, box, atype, rcut, sel)
    # kept distances are the nearest: every kept neighbour is closer than every dropped one
    I, J, N, R = reference_pairs(coord[0], box[0], atype, rcut)
    idx, sh = np.asarray(nl.idx[0]), np.asarray(nl.shift[0])
    sec = np.concatenate([[0], np.cumsum(sel)])
    for i in range(natoms):
        for t in range(2):
            j, n = idx[i, sec[t] : sec[t + 1]], sh[i, sec[t] : sec[t + 1]]
            r = np.linalg.norm(coord[0, j] - coord[0, i] + n @ box[0], axis=-1)
            dropped = np.sort(R[(I == i) & (atype[J] == t)])[sel[t] :]
            assert r.max() <= dropped.min()


@pytest.mark.parametrize("method", METHODS)
def test_padding_atoms(method):
    """Padding atoms (atype −1) are never neighbours and have empty rows; real rows are unaffected."""
    rng = np.random.default_rng(5)
    nreal, npad, nframes = 60, 8, 2
    box = np.stack([random_triclinic_box(rng, 9.5, tilt=0.3) for _ in range(nframes)])
    coord_real = np.einsum("fni,fij->fnj", rng.uniform(-0.3, 1.3, (nframes, nreal, 3)), box)
    # padding atoms sit on real atoms, at the origin, and at random places
    pad = np.concatenate(
        [coord_real[:, :3], np.zeros((nframes, 2, 3)), rng.uniform(0, 9, (nframes, npad - 5, 3))], axis=1
    )
    coord = np.concatenate([coord_real, pad], axis=1)
    atype_real = random_types(rng, nreal)
    atype = np.concatenate([atype_real, -np.ones(npad, int)])
    # per-frame atype: frame 1 also pads two real atoms' slots
    atype_f = np.stack([atype, atype])
    atype_f[1, [4, 9]] = -1
    rcut, sel = 4.0, (20, 30)
    _, nl = build_with(method, coord, box, atype_f, rcut, sel)
    check_all(nl, coord, box, atype_f, rcut, sel)
    idx = np.asarray(nl.idx)
    for f in range(nframes):
        padded = np.flatnonzero(atype_f[f] < 0)
        assert np.all(idx[f, padded] == -1) and np.all(np.asarray(nl.nneigh)[f, padded] == 0)
        assert not np.isin(idx[f], padded).any()
    # frame 0 equals the list of the unpadded system
    _, nl0 = build_with(method, coord_real[:1], box[:1], atype_real, rcut, sel)
    assert np.array_equal(idx[0, :nreal], np.asarray(nl0.idx[0]))
    assert np.array_equal(np.asarray(nl.shift)[0, :nreal], np.asarray(nl0.shift[0]))


@pytest.mark.slow  # the slowest test here: the brute method on 1,000 atoms (27,000 candidates per atom)
def test_large_system_cell_equals_brute_and_is_linear():
    rng = np.random.default_rng(3)
    natoms, rho, rcut, sel = 1000, 0.1, 4.0, (25, 40)
    L = (natoms / rho) ** (1 / 3)
    box = (np.diag([L, L, L]))[None]
    coord = rng.uniform(-0.2, 1.2, (1, natoms, 3)) * L
    atype = random_types(rng, natoms)
    spec_c, nl_c = build_with("cell", coord, box, atype, rcut, sel)
    spec_b, nl_b = build_with("brute", coord, box, atype, rcut, sel)
    assert spec_c.ncell == (5, 5, 5)
    for a, b in zip(nl_c[:3], nl_b[:3]):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(nl_c.nneigh).max() > 10  # a real workload
    check_all(nl_c, coord, box, atype, rcut, sel)

    # O(N): candidates per atom of the cell method (offsets × capacity) do not grow with N at fixed density
    def candidates(n):
        Ln = (n / rho) ** (1 / 3)
        c = rng.uniform(0, Ln, (1, n, 3))
        s = allocate(c, np.diag([Ln] * 3)[None], rcut, sel, method="cell")
        noff = int(np.prod([2 * r + 1 for r in s.reach]))
        assert noff == 27
        return noff * s.capacity

    cand = {n: candidates(n) for n in (1000, 4000, 16000, 64000)}
    assert max(cand.values()) <= 1.6 * cand[1000], cand
    assert cand[64000] < 64000 / 50, cand
    # auto: the cell list once it examines fewer candidates than there are atoms (the minimum image's count)
    L4 = (4000 / rho) ** (1 / 3)
    assert allocate(rng.uniform(0, L4, (1, 4000, 3)), np.diag([L4] * 3)[None], rcut, sel).method == "cell"


def test_jit_spec_reused_on_other_geometries():
    """A jitted build with a fixed spec serves other frames of the same shape (new coordinates, boxes)."""
    rng = np.random.default_rng(21)
    natoms, rcut, sel = 90, 3.6, (15, 25)
    L = (natoms / 0.09) ** (1 / 3)
    box_a = np.stack([random_triclinic_box(rng, L, tilt=0.25) for _ in range(2)])
    coord_a = np.einsum("fni,fij->fnj", rng.uniform(0, 1, (2, natoms, 3)), box_a)
    atype = random_types(rng, natoms)
    for method in METHODS:
        spec = allocate(coord_a, box_a, rcut, sel, method=method, capacity_factor=2.0)
        fn = jax.jit(functools.partial(build, spec))
        # other geometries: a rescaled (slightly larger, no thinner anywhere) and re-tilted box, new atoms
        box_b = box_a * 1.05 + rng.uniform(-0.02, 0.02, (2, 3, 3)) * L
        assert np.all(spec_widths(box_b).min(axis=0) >= spec_widths(box_a).min(axis=0))
        for _ in range(2):
            coord_b = np.einsum("fni,fij->fnj", rng.uniform(-1, 2, (2, natoms, 3)), box_b)
            nl = fn(coord_b, box_b, atype)
            check_all(nl, coord_b, box_b, atype, rcut, sel)
        if hasattr(fn, "_cache_size"):
            assert fn._cache_size() == 1  # one compilation served all of them


def spec_widths(box):
    return np.array([_face_widths(b) for b in box])


def test_cell_overflow_flag():
    """Frames that crowd a cell beyond the allocated capacity raise ``cell_overflow``."""
    rng = np.random.default_rng(2)
    natoms, L, rcut, sel = 120, 12.0, 3.5, (60, 60)
    box = np.diag([L, L, L])[None]
    coord = rng.uniform(0, L, (1, natoms, 3))
    atype = random_types(rng, natoms)
    spec = allocate(coord, box, rcut, sel, method="cell")
    assert not bool(_jit_build(spec)(coord, box, atype).cell_overflow)
    crowded = coord.copy()
    crowded[0, :40] = rng.uniform(0.1, 1.5, (40, 3))  # 40 atoms in one 4 Å cell
    assert bool(_jit_build(spec)(crowded, box, atype).cell_overflow)


def assert_same_sections(a, b, sel):
    """Two lists hold the same (neighbour, image) pairs in each type's section of slots, in any order."""
    sec = np.concatenate([[0], np.cumsum(sel)])
    for t in range(len(sel)):
        keys = []
        for nl in (a, b):
            idx = np.asarray(nl.idx)[..., sec[t] : sec[t + 1]]
            sh = np.rint(np.asarray(nl.shift)[..., sec[t] : sec[t + 1], :]).astype(int)
            key = ((idx * 7 + sh[..., 0] + 3) * 7 + sh[..., 1] + 3) * 7 + sh[..., 2] + 3
            keys.append(np.sort(np.where(idx >= 0, key, -1), axis=-1))
        np.testing.assert_array_equal(keys[0], keys[1])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "sel",
    [(40, 60), (5, 9), (100,), (12,), (30, 30, 40), (3, 4, 5)],
    ids=["sel_ample", "sel_tight", "one_ample", "one_tight", "three_ample", "three_tight"],
)
def test_order_any_same_neighbours(method, sel):
    """order="any" (the training step's sort-free list) holds the same neighbours in every type group as
    the nearest-first list, and equals it exactly when some type overflows its sel (nearest kept); with
    one, two and three types (a running count per type, one scatter for all)."""
    rng = np.random.default_rng(21)
    natoms, nframes, rcut = 90, 2, 3.7
    L = (natoms / 0.09) ** (1 / 3)
    box = np.stack([random_triclinic_box(rng, L) for _ in range(nframes)])
    coord = np.einsum("fni,fij->fnj", rng.uniform(-0.5, 1.5, (nframes, natoms, 3)), box)
    atype = random_types(rng, natoms, len(sel))
    spec = allocate(coord, box, rcut, sel, method=method)
    near = _jit_build(spec)(coord, box, atype)
    anyo = jax.jit(functools.partial(build, spec, order="any"))(coord, box, atype)
    np.testing.assert_array_equal(np.asarray(anyo.nneigh), np.asarray(near.nneigh))
    if np.any(np.asarray(near.nneigh) > np.asarray(sel)):
        np.testing.assert_array_equal(np.asarray(anyo.idx), np.asarray(near.idx))
        np.testing.assert_array_equal(np.asarray(anyo.shift), np.asarray(near.shift))
        return
    assert min(sel) >= 30, "an ample sel must not overflow"
    assert_same_sections(anyo, near, sel)
    assert not np.array_equal(np.asarray(anyo.idx), np.asarray(near.idx)), "expected a different slot order"


def test_closest_pair_distance_equals_neighbour_list_minimum():
    """The host-side sanity check (minimum image) equals the shortest pair vector of a neighbour list."""
    from jaxmd_dp.data.load import min_pair_distance as closest_pair_distance
    from jaxmd_dp.geometry.env_mat import pair_vectors

    rng = np.random.default_rng(3)
    box = np.stack([random_triclinic_box(rng, 8.0, tilt=0.3) for _ in range(3)])
    coord = np.einsum("fni,fij->fnj", rng.uniform(-1, 2, (3, 50, 3)), box)
    coord[1, 4] = coord[1, 9] + box[1, 2] + 0.03  # an image of atom 9 almost on atom 4
    got = closest_pair_distance(coord, box)
    spec = allocate(coord, box, 3.0, (50,), method="brute")
    nl = _jit_build(spec)(coord, box, np.zeros(50, int))
    d = np.linalg.norm(np.asarray(pair_vectors(coord, box, nl.idx, nl.shift)), axis=-1)
    want = np.where(np.asarray(nl.idx) >= 0, d, np.inf).min(axis=(1, 2))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[1] == pytest.approx(0.03 * np.sqrt(3), rel=1e-9)
    assert np.all(closest_pair_distance(coord[:, :1], box) == np.inf)
    free = closest_pair_distance(coord, None)  # no PBC: plain distances
    assert np.all(free >= got - 1e-12)


def test_search_skips_images_beyond_rcut():
    """Image offsets whose cells lie farther than rcut are not searched, and the lists stay complete: a
    7.2 Å cube with rcut 8 Å (Cu's 32-atom cells) searches 81 of the 125 images in reach. A box with the
    same reach but smaller does not fit that spec: it needs some of the skipped images."""
    rng = np.random.default_rng(5)
    L, rcut, natoms, sel = 7.2, 8.0, 8, (300, 300)
    box = np.stack([np.diag([L, L, L]), np.diag([L, L, L]) * 1.02])
    coord = np.einsum("fni,fij->fnj", rng.uniform(-0.3, 1.3, (2, natoms, 3)), box)
    atype = random_types(rng, natoms)
    spec, nl = build_with("brute", coord, box, atype, rcut, sel)
    assert spec.reach == (2, 2, 2) and len(spec.skip) == 125 - 81
    assert len(search_offsets(spec)) == 81 and candidates_per_atom(spec) == 81 * natoms
    check_all(nl, coord, box, atype, rcut, sel)

    # a smaller cube within the same reach (5.6 Å: 8/5.6 < 2) needs (2, 2, 0) (gap 7.9 Å): it does not fit
    small = box[:1] * (5.6 / L)
    assert spec_widths(small).min() * 2 >= rcut and not fits(spec, small) and fits(spec, box * 1.01)
    coord_s = np.einsum("fni,fij->fnj", rng.uniform(0, 1, (1, natoms, 3)), small)
    spec_s, nl_s = build_with("brute", coord_s, small, atype, rcut, sel)
    assert spec_s.reach == (2, 2, 2) and (2, 2, 0) not in spec_s.skip and (2, 2, 2) in spec_s.skip
    check_all(nl_s, coord_s, small, atype, rcut, sel)

    # a long rectangular cell: the per-axis bound skips (0, ±2, ±2) (gap 8.8 Å), which the singular value
    # alone would not (3 Å × √2)
    box_r = np.diag([3.0, 6.0, 6.5])[None]
    coord_r = np.einsum("fni,fij->fnj", rng.uniform(0, 1, (1, natoms, 3)), box_r)
    spec_r, nl_r = build_with("brute", coord_r, box_r, atype, 7.0, sel)
    assert spec_r.reach == (3, 2, 2) and (0, 2, 2) in spec_r.skip and (0, 1, 2) not in spec_r.skip
    check_all(nl_r, coord_r, box_r, atype, 7.0, sel)
    # similar boxes give the same spec (one compiled builder): the skipped offsets, not the box, are in it
    assert allocate(coord, box * 1.01, rcut, sel, method="brute") == spec


def wide_triclinic(rng, natoms, nframes, rcut, tilt=0.3):
    """Triclinic boxes whose every perpendicular width exceeds 2·rcut (the minimum-image method's domain),
    with unwrapped coordinates up to a box length outside the cell."""
    boxes = []
    while len(boxes) < nframes:
        b = random_triclinic_box(rng, 3.0 * rcut, tilt)
        if _face_widths(b).min() > 2.05 * rcut:
            boxes.append(b)
    box = np.stack(boxes)
    coord = np.einsum("fni,fij->fnj", rng.uniform(-1.0, 2.0, (nframes, natoms, 3)), box)
    return coord, box


@pytest.mark.parametrize("sel", [(40, 60), (5, 9)], ids=["sel_ample", "sel_tight"])
def test_minimage_matches_reference(sel):
    """The minimum-image method on triclinic boxes wider than 2·rcut: the reference's neighbours, nearest
    first (truncated to a tight sel as well), the same as brute force over the 27 images, and the same
    neighbours in order="any"."""
    rng = np.random.default_rng(31)
    natoms, rcut = 80, 3.2
    coord, box = wide_triclinic(rng, natoms, 3, rcut)
    atype = random_types(rng, natoms)
    spec, nl = build_with("minimage", coord, box, atype, rcut, sel)
    assert spec.reach == (0, 0, 0) and candidates_per_atom(spec) == natoms
    check_all(nl, coord, box, atype, rcut, sel)
    _, brute = build_with("brute", coord, box, atype, rcut, sel)
    for a, b in zip(nl[:3], brute[:3]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    anyo = jax.jit(functools.partial(build, spec, order="any"))(coord, box, atype)
    np.testing.assert_array_equal(np.asarray(anyo.nneigh), np.asarray(nl.nneigh))
    if sel == (5, 9):
        assert np.any(np.asarray(nl.nneigh) > np.asarray(sel)), "tight sel should overflow somewhere"
        return
    assert_same_sections(anyo, nl, sel)


def test_minimage_candidates_for_env_stats():
    """The statistics' candidate pairs (``candidates``) of the minimum-image method: the pair vectors and
    counts of the brute-force method's, as multisets per centre atom."""
    from jaxmd_dp.geometry.neighbor import candidates

    rng = np.random.default_rng(32)
    natoms, rcut, sel = 40, 2.5, (30, 30)
    coord, box = wide_triclinic(rng, natoms, 2, rcut)
    atype = np.broadcast_to(random_types(rng, natoms), (2, natoms))
    got, want = (
        candidates(allocate(coord, box, rcut, sel, method=m), coord, box, atype) for m in ("minimage", "brute")
    )
    np.testing.assert_array_equal(np.asarray(got.nneigh), np.asarray(want.nneigh))
    for c in (got, want):
        assert np.asarray(c.valid).any()

    def vectors(c, f, i):
        v = np.stack([np.asarray(x)[f, i][np.asarray(c.valid)[f, i]] for x in c.d], axis=-1)
        return v[np.lexsort(np.round(v, 9).T)]

    for f in range(2):
        for i in range(natoms):
            np.testing.assert_allclose(vectors(got, f, i), vectors(want, f, i), atol=1e-12)


def test_minimage_auto_choice_and_fits():
    """``auto`` takes the minimum image where it examines fewer candidates than the cell list (water's 192
    atoms in a 12.4 Å box, rcut 6 Å) or than brute force over the images in reach (boxes narrower than
    2·rcut, in a supercell), the cell list for a large box. A minimum-image spec does not fit a box whose
    supercell is narrower than 2·rcut."""
    rng = np.random.default_rng(33)
    rcut, sel = 6.0, (46, 92)
    box = np.diag([12.44, 12.44, 12.44])[None]
    coord = rng.uniform(0, 12.44, (1, 192, 3))
    spec = allocate(coord, box, rcut, sel)
    assert spec.method == "minimage" and candidates_per_atom(spec) == 192
    assert candidates_per_atom(allocate(coord, box, rcut, sel, method="cell")) > 192
    assert fits(spec, box * 1.05) and not fits(spec, box * 0.96)
    big = box * 2
    assert allocate(rng.uniform(0, 24.88, (1, 1536, 3)), big, rcut, sel).method == "cell"
    # narrower than 2·rcut: a supercell of 2 × 2 × 2 boxes, 8 × 192 candidates against 27 × 192 images
    small = allocate(coord * 0.9, box * 0.9, rcut, sel)
    assert small.method == "minimage" and small.ncell == (2, 2, 2) and candidates_per_atom(small) == 8 * 192
    assert candidates_per_atom(allocate(coord * 0.9, box * 0.9, rcut, sel, method="brute")) == 27 * 192
    assert fits(small, box * 0.9) and not fits(small, box * 0.45)
    # Cu's 32 atoms in a 7.2 Å cube with rcut 8 Å: 3 × 3 × 3 boxes (864 candidates) against 81 images (2,592)
    cu = allocate(rng.uniform(0, 7.2, (1, 32, 3)), np.diag([7.2] * 3)[None], 8.0, (512,))
    assert cu.method == "minimage" and cu.ncell == (3, 3, 3) and candidates_per_atom(cu) == 864


def test_reduction_jit_compiles_with_cpu_options_once_per_backend(jit_options):
    """The programs that reduce candidate blocks (the neighbour scan, the statistics' sums) are jitted with
    :data:`CPU_REDUCE_OPTIONS` on the CPU, the backend's defaults elsewhere; two threads calling a new one at
    once share one jit (one cache), and both get the right result."""
    import threading

    from jaxmd_dp.geometry import neighbor, stats
    from jaxmd_dp.geometry.neighbor_stat import _frame_stats

    neighbor.reduction_jit(lambda x: x).options_for("cpu")  # this jaxlib's options checked (its own probe jit) first
    made = jit_options
    made.clear()

    def cube_sum(n, x):
        return (x**n).sum(axis=-1)

    fn = neighbor.reduction_jit(cube_sum, static_argnums=(0,))
    x = np.arange(12.0).reshape(3, 4)
    start, out = threading.Barrier(2), [None, None]

    def run(k):
        start.wait()
        out[k] = np.asarray(fn(3, x))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [neighbor.CPU_REDUCE_OPTIONS] and jax.default_backend() == "cpu"
    for o in out:
        np.testing.assert_array_equal(o, (x**3).sum(axis=-1))
    assert fn.options_for("cpu") == {"xla_backend_optimization_level": 1} and fn.options_for("gpu") is None
    for program in (_frame_stats, stats._chunk_sums_candidates):
        assert program.options_for("cpu") == neighbor.CPU_REDUCE_OPTIONS


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_inverse_box_matches_lapack_and_lowers_without_it(dtype):
    """``inverse_box`` (cross products over the determinant) equals numpy's LU inverse to rounding on
    triclinic, left-handed and elongated cells, batched; and a list build lowers with no LAPACK call (whose
    first lowering imports scipy and whose code every scan and store program paid to compile)."""
    rng = np.random.default_rng(3)
    box = rng.normal(size=(64, 3, 3)) + 4.0 * np.eye(3)
    box[1::3] *= -1.0  # left-handed: negative determinant
    box[2::3] *= np.array([1.0, 1.0, 40.0])[:, None]  # one long cell vector
    got = np.asarray(inverse_box(box.astype(dtype)))
    assert got.dtype == dtype and got.shape == box.shape
    tol = 1e-13 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, np.linalg.inv(box), rtol=tol, atol=tol * np.abs(np.linalg.inv(box)).max())
    np.testing.assert_allclose(np.asarray(inverse_box(box[0])), np.linalg.inv(box[0]), rtol=1e-13)
    coord = rng.uniform(0.0, 6.0, (2, 16, 3))
    cell = np.broadcast_to(np.diag([6.0, 6.5, 7.0]), (2, 3, 3))
    atype = np.arange(16) % 2
    for method in METHODS:
        spec = allocate(coord, cell, 3.0, (8, 8), method=method)
        text = jax.jit(lambda c, b: build(spec, c, b, atype).idx).lower(coord, cell).as_text()
        assert "lapack" not in text.lower() and "custom_call" not in text, method
