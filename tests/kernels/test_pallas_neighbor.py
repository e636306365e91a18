"""The Pallas neighbour-list kernel (interpret mode) gives exactly the jnp ``build``'s list.

Exact means: ``idx`` and ``shift`` slot for slot (same order inside each type group: nearest first, ties
by candidate order; with order "any", candidate order wherever no type overflows), ``nneigh`` and
``cell_overflow`` equal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pallas_cases import SEL, make_case, run_fast, water_case

from jaxmd_dp.geometry import neighbor as ref
from pallas_kernels import neighbor as pnb


def _compare(spec, coord, box, atype):
    want = jax.jit(lambda c, b, t: ref.build(spec, c, b, t))(coord, box, atype)
    got = run_fast(lambda c, b, t: pnb.build(spec, c, b, t, interpret=True), coord, box, atype)
    assert got.idx.dtype == want.idx.dtype and got.idx.shape == want.idx.shape
    assert got.shift.dtype == want.shift.dtype and got.shift.shape == want.shift.shape
    np.testing.assert_array_equal(np.asarray(got.idx), np.asarray(want.idx))
    np.testing.assert_array_equal(np.asarray(got.shift), np.asarray(want.shift))
    np.testing.assert_array_equal(np.asarray(got.nneigh), np.asarray(want.nneigh))
    assert bool(got.cell_overflow) == bool(want.cell_overflow)
    return want, got


@pytest.mark.parametrize(
    "name,method,rcut",
    [("triclinic", "brute", None), ("triclinic", "cell", 3.0), ("small", "brute", None), ("nopbc", "brute", None)],
)
def test_matches_jnp_build(name, method, rcut):
    case = make_case(name)
    rcut = rcut or case.rcut
    spec = ref.allocate(case.coord, case.box, rcut, SEL, method)
    assert spec.method == method
    want, _ = _compare(spec, case.coord, case.box, case.atype)
    nn = np.asarray(want.nneigh)
    assert (nn > 0).any()
    if name == "small":  # rcut > L/2: several images of one atom, more neighbours than sel
        assert spec.reach == (2, 2, 2)
        assert (nn > np.asarray(SEL)).any()
        assert pnb.plan(spec, case.coord.shape[1]).nchunks > 1  # multi-chunk path exercised
    if name == "triclinic" and method == "cell":
        assert np.prod(spec.ncell) >= 8


def test_float32():
    case = make_case("triclinic", seed=3)
    spec = ref.allocate(case.coord, case.box, 3.0, SEL, "cell")
    _compare(spec, jnp.asarray(case.coord, jnp.float32), jnp.asarray(case.box, jnp.float32), case.atype)


def test_cell_overflow_flag():
    """A capacity below the fullest cell: both drop the same atoms and raise the flag."""
    case = make_case("triclinic", seed=4)
    spec = ref.allocate(case.coord, case.box, 3.0, SEL, "cell")
    spec = spec._replace(capacity=2)
    want, _ = _compare(spec, case.coord, case.box, case.atype)
    assert bool(want.cell_overflow)


def _as_sets(nl, sel):
    """Per (frame, atom, type block): the set of (j, image) in the block."""
    idx, shift = np.asarray(nl.idx), np.asarray(nl.shift)
    out, start = [], 0
    for n in sel:
        blk_i, blk_s = idx[..., start : start + n], shift[..., start : start + n, :]
        out.append(
            [
                [
                    {(int(j), *map(float, s)) for j, s in zip(blk_i[f, a], blk_s[f, a]) if j >= 0}
                    for a in range(idx.shape[1])
                ]
                for f in range(idx.shape[0])
            ]
        )
        start += n
    return out


def test_exact_distance_ties_same_sets():
    """Rigid water: both H of a molecule are exactly 0.9572 Å from its O, so the two implementations'
    rounding decides their order; per type block the neighbour sets are identical and both are sorted."""
    case = water_case()
    spec = ref.allocate(case.coord, case.box, case.rcut, SEL, "brute")
    want = jax.jit(lambda c, b, t: ref.build(spec, c, b, t))(case.coord, case.box, case.atype)
    got = run_fast(lambda c, b, t: pnb.build(spec, c, b, t, interpret=True), case.coord, case.box, case.atype)
    np.testing.assert_array_equal(np.asarray(got.nneigh), np.asarray(want.nneigh))
    assert (np.asarray(want.nneigh) <= np.asarray(SEL)).all()  # no truncation inside a tie group
    assert _as_sets(got, SEL) == _as_sets(want, SEL)
    # nearest first in every block
    idx, shift = np.asarray(got.idx)[0], np.asarray(got.shift)[0]
    d = case.coord[0][np.maximum(idx, 0)] - case.coord[0][:, None] + shift @ case.box[0]
    r = np.where(idx >= 0, np.linalg.norm(d, axis=-1), 1e30)  # empty slots last
    start = 0
    for n in SEL:
        assert (np.diff(r[:, start : start + n], axis=1) >= -1e-12).all()
        start += n


def test_minimage_spec_through_the_kernel():
    """A minimum-image spec (boxes wider than 2·rcut) on the Pallas path: ``neighbor.build`` hands the kernel
    the equivalent brute-force spec, and the lists equal the jnp minimum-image build's, nearest first."""
    case = make_case("triclinic", seed=5)
    spec = ref.allocate(case.coord, case.box, 3.0, SEL, "minimage")
    want = jax.jit(lambda c, b, t: ref.build(spec, c, b, t, kernels="jnp"))(case.coord, case.box, case.atype)
    got = run_fast(lambda c, b, t: ref.build(spec, c, b, t, kernels="pallas"), case.coord, case.box, case.atype)
    assert (np.asarray(want.nneigh) > 0).any()
    np.testing.assert_array_equal(np.asarray(got.nneigh), np.asarray(want.nneigh))
    np.testing.assert_array_equal(np.asarray(got.idx), np.asarray(want.idx))
    np.testing.assert_array_equal(np.asarray(got.shift), np.asarray(want.shift))


@pytest.mark.parametrize(
    "name,method,rcut,sel,dtype",
    [
        ("triclinic", "cell", 3.0, SEL, np.float64),
        ("triclinic", "brute", None, (24, 32), np.float32),
        ("small", "brute", None, (96, 96), np.float64),
    ],
)
def test_any_order_matches_jnp_any(name, method, rcut, sel, dtype):
    """Where no type overflows, order "any" is the jnp build's order "any" slot for slot (the neighbours in
    candidate order), which differs from nearest first; "small" has two chunks of candidates per centre."""
    case = make_case(name)
    case = case._replace(coord=case.coord.astype(dtype), box=case.box.astype(dtype))
    spec = ref.allocate(case.coord, case.box, rcut or case.rcut, sel, method)
    want = jax.jit(lambda c, b, t: ref.build(spec, c, b, t, order="any"))(case.coord, case.box, case.atype)
    got = run_fast(
        lambda c, b, t: pnb.build(spec, c, b, t, order="any", interpret=True), case.coord, case.box, case.atype
    )
    nn = np.asarray(want.nneigh)
    assert (nn <= np.asarray(sel)).all() and (nn > 0).any()
    assert (pnb.plan(spec, case.coord.shape[1]).nchunks > 1) == (name == "small")
    for field in ("idx", "shift", "nneigh"):
        np.testing.assert_array_equal(np.asarray(getattr(got, field)), np.asarray(getattr(want, field)))
    nearest = ref.build(spec, case.coord, case.box, case.atype)
    assert not np.array_equal(np.asarray(got.idx), np.asarray(nearest.idx))
    assert _as_sets(got, sel) == _as_sets(nearest, sel)


@pytest.mark.parametrize("name", ["triclinic", "small", "nopbc"])
def test_any_order_overflow_keeps_the_nearest(name):
    """Where a centre has more neighbours of a type than its slots, order "any" keeps the nearest of that
    type, as order "nearest" does: per type block the same neighbours, and the same counts."""
    case = make_case(name)
    spec = ref.allocate(case.coord, case.box, case.rcut, SEL, "brute")
    want = jax.jit(lambda c, b, t: ref.build(spec, c, b, t))(case.coord, case.box, case.atype)
    got = run_fast(
        lambda c, b, t: pnb.build(spec, c, b, t, order="any", interpret=True), case.coord, case.box, case.atype
    )
    assert (np.asarray(want.nneigh) > np.asarray(SEL)).any()
    np.testing.assert_array_equal(np.asarray(got.nneigh), np.asarray(want.nneigh))
    assert _as_sets(got, SEL) == _as_sets(want, SEL)


def test_any_order_through_build():
    """``neighbor.build(..., kernels="pallas", order="any")`` runs the kernel's order "any"."""
    case = make_case("triclinic", seed=2)
    spec = ref.allocate(case.coord, case.box, 3.0, SEL, "cell")
    want = jax.jit(lambda c, b, t: ref.build(spec, c, b, t, kernels="jnp", order="any"))(
        case.coord, case.box, case.atype
    )
    got = run_fast(
        lambda c, b, t: ref.build(spec, c, b, t, kernels="pallas", order="any"), case.coord, case.box, case.atype
    )
    assert (np.asarray(want.nneigh) <= np.asarray(SEL)).all()
    np.testing.assert_array_equal(np.asarray(got.idx), np.asarray(want.idx))
    np.testing.assert_array_equal(np.asarray(got.shift), np.asarray(want.shift))
