"""A neighbour list of one section (a mixed-types ``sel``, DPA-1's) holds the nearest neighbours of every type:
the per-type list of the same atoms all of one type (the reference of test_neighbor), with ``nneigh`` the count
of every type, for the three methods, sorted or not, a sel above or below the most neighbours."""

import jax
import numpy as np
import pytest
from test_neighbor import METHODS, build_with, check_all, random_triclinic_box, random_types

from jaxmd_dp.geometry.neighbor import allocate, build


def _frames(seed, nframes=2, natoms=40, L=9.0, ntypes=3):
    rng = np.random.default_rng(seed)
    box = np.stack([random_triclinic_box(rng, L) for _ in range(nframes)])
    frac = rng.uniform(-0.5, 1.5, (nframes, natoms, 3))
    coord = np.einsum("fni,fij->fnj", frac, box)
    atype = random_types(rng, natoms, ntypes)
    return coord, box, atype


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("sel", [60, 12])
def test_one_section_is_every_type_nearest_first(method, sel):
    coord, box, atype = _frames(0)
    rcut = 4.0
    _, nl = build_with(method, coord, box, atype, rcut, (sel,))
    assert np.asarray(nl.nneigh).shape == (2, 40, 1)
    one_type = np.where(atype >= 0, 0, atype)
    check_all(nl, coord, box, one_type, rcut, (sel,))
    assert (np.asarray(nl.nneigh).max() > sel) == (sel == 12)


def test_padding_atoms_are_no_neighbours_and_any_order_keeps_the_set():
    coord, box, atype = _frames(1)
    atype = atype.copy()
    atype[[3, 17]] = -1
    rcut, sel = 4.0, (60,)
    spec = allocate(coord, box, rcut, sel)
    nl = build(spec, coord, box, atype)
    check_all(nl, coord, box, np.where(atype >= 0, 0, -1), rcut, sel)
    idx = np.asarray(nl.idx)
    assert not np.isin(idx, [3, 17]).any() and np.all(idx[:, [3, 17]] == -1)
    anyorder = jax.jit(lambda c, b: build(spec, c, b, atype, order="any"))(coord, box)
    for f in range(2):
        for i in range(40):
            got = {
                (int(j), *map(int, s)) for j, s in zip(np.asarray(anyorder.idx[f, i]), anyorder.shift[f, i]) if j >= 0
            }
            want = {(int(j), *map(int, s)) for j, s in zip(idx[f, i], nl.shift[f, i]) if j >= 0}
            assert got == want


def test_one_type_lists_are_unchanged():
    """For one type, the list of one section is that type's list: every neighbour, as before."""
    coord, box, _ = _frames(2)
    atype = np.zeros(40, int)
    rcut, sel = 4.0, (30,)
    nl = build(allocate(coord, box, rcut, sel), coord, box, atype)
    check_all(nl, coord, box, atype, rcut, sel)
