"""Physics of the se_e2_a energy model: forces and virials are the right derivatives, the energy has the
symmetries it must have.

A small random model (two types, sel (12, 24), rcut 4 Å) with random non-trivial statistics, in both
embedding layouts (type_one_side, and one net per type pair with resnet_dt). Two kinds of statistics:
- "sym": DeePMD-kit's structure (davg only in column 0, one dstd for columns 1–3, same for every slot),
  which keeps the model rotation invariant, hence the virial symmetric;
- "asym": davg ≠ 0 and different dstd in columns 1–3, which breaks rotation invariance (on purpose) so
  the virial is asymmetric and its layout V[3k + j] = Σ F_k r_j (transposition) is actually tested.
Finite differences are central, h = 1e-5 (Å, or strain), float64.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry.env_mat import env_rows, normalize
from jaxmd_dp.geometry.neighbor import NeighborList, allocate, build
from jaxmd_dp.model.energy import DeepPot, ModelHyper, Stats, init_params, predict

HYPER = ModelHyper.from_deepmd(
    {
        "type_map": ["O", "H"],
        "descriptor": {
            "type": "se_e2_a",
            "sel": [12, 24],
            "rcut": 4.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8],
            "axis_neuron": 2,
            "type_one_side": True,
        },
        "fitting_net": {"neuron": [8, 8]},
    }
)
HYPERS = {
    "one_side": HYPER,
    "two_side_resnet_dt": HYPER.replace(type_one_side=False, resnet_dt=True),
}
VARIANTS = tuple(HYPERS)
# the no-PBC code path does not depend on the hyper-parameters: one variant covers it (one compilation less)
CASES = [(v, True) for v in VARIANTS] + [(VARIANTS[0], False)]
CASE_IDS = [f"{v}-{'pbc' if p else 'no_pbc'}" for v, p in CASES]
H = 1e-5


# ----------------------------------------------------------------------------------------------------
# compiled functions (one set per hyper) and cached models / geometries / neighbour lists
# ----------------------------------------------------------------------------------------------------


NF = 18  # every evaluation runs on this many frames (FD batches: 3 atoms × 3 components × ±h, or 9 strains × ±h)


@functools.cache
def compiled(hyper: ModelHyper):
    """jitted (predict on NF frames, ∂E/∂d) with the static hyper closed over: two compilations per hyper
    (three with the no-PBC path)."""

    def energy_of_pairs(params, stats, d, idx, atype):
        """E as a function of the pair vectors d (nf, natoms, nnei, 3) only, energy bias left out."""
        R = normalize(env_rows(d, idx >= 0, hyper.rcut, hyper.rcut_smth), atype, stats.davg, stats.dstd)
        return jnp.sum(DeepPot(hyper).apply({"params": params}, R, atype))

    return (
        jax.jit(lambda p, s, c, b, t, nl: predict(hyper, p, s, c, b, t, nl)),
        jax.jit(jax.grad(energy_of_pairs, argnums=2)),
    )


@functools.cache
def _jit_build(spec):
    return jax.jit(functools.partial(build, spec))


def neighbors(coord, box, atype, hyper):
    """Neighbour list of one geometry (frame axis of 1); asserts that sel is not exceeded."""
    c = np.asarray(coord)[None]
    b = None if box is None else np.asarray(box)[None]
    spec = allocate(c, b, hyper.rcut, hyper.sel, method="brute")
    nl = _jit_build(spec)(c, b, atype)
    assert np.all(np.asarray(nl.nneigh) <= np.asarray(hyper.sel)), "geometry overflows sel: truncation"
    assert np.all(np.asarray(nl.nneigh).sum(-1) > 0)
    return nl


def tile(nl, n):
    return NeighborList(*(jnp.repeat(x, n, axis=0) for x in nl[:3]), nl.cell_overflow)


class Model:
    def __init__(self, hyper, params, stats):
        self.hyper, self.params, self.stats = hyper, params, Stats(*(jnp.asarray(x) for x in stats))
        self._pred, self._dEdd = compiled(hyper)

    def evaluate(self, coords, boxes, atype, nl):
        """Predictions (numpy) of up to NF geometries sharing the 1-frame neighbour list ``nl``."""
        n = len(coords)
        assert n <= NF
        pad = lambda x: np.concatenate([x, np.repeat(x[-1:], NF - n, axis=0)])  # noqa: E731
        b = None if boxes is None else jnp.asarray(pad(np.asarray(boxes)))
        c = jnp.asarray(pad(np.asarray(coords)))
        out = self._pred(self.params, self.stats, c, b, jnp.asarray(atype), tile(nl, NF))
        return type(out)(*(np.asarray(x)[:n] for x in out))

    def predict(self, coord, box, atype, nl=None):
        """Prediction of one geometry, frame axis removed."""
        nl = neighbors(coord, box, atype, self.hyper) if nl is None else nl
        out = self.evaluate(coord[None], None if box is None else box[None], atype, nl)
        return type(out)(*(x[0] for x in out))

    def energies(self, coords, boxes, atype, nl):
        return self.evaluate(coords, boxes, atype, nl).energy

    def dE_dd(self, coord, box, atype, nl):
        """(d, ∂E/∂d, idx) for one geometry, d computed here in numpy from idx and shift."""
        idx = np.asarray(nl.idx[0])
        shift = np.asarray(nl.shift[0])
        j = np.where(idx >= 0, idx, 0)
        d = coord[j] - coord[:, None, :]
        if box is not None:
            d = d + shift @ box
        g = self._dEdd(self.params, self.stats, jnp.asarray(d)[None], jnp.asarray(idx)[None], jnp.asarray(atype)[None])
        return d, np.asarray(g)[0], idx


def make_stats(hyper, rng, kind):
    """Random statistics in DeePMD-kit's usual range (dstd ~0.1–0.2; with dstd ~1 this tiny random
    model is nearly flat, forces ~1e-3 eV/Å)."""
    nt, nnei = hyper.ntypes, hyper.nnei
    davg, dstd = np.zeros((nt, nnei, 4)), np.ones((nt, nnei, 4))
    for t in range(nt):
        davg[t, :, 0] = rng.uniform(0.05, 0.15)
        dstd[t, :, 0] = rng.uniform(0.1, 0.2)
        dstd[t, :, 1:] = rng.uniform(0.1, 0.2)
        if kind == "asym":
            davg[t, :, 1:] = rng.uniform(-0.15, 0.15, 3)
            dstd[t, :, 1:] = rng.uniform(0.1, 0.2, 3)
    return Stats(davg, dstd, rng.uniform(-2.0, 2.0, nt))


def random_params(hyper, seed):
    """Random weights with the tree structure of ``init_params`` (traced with ``eval_shape``: nothing
    compiled), drawn like DeePMD-kit's initialisation but with doubled matrices (livelier forces):
    matrix ~ N(0, 4/(in + out)), bias ~ N(0, 1), idt ~ N(0.1, 0.001²)."""
    shapes = jax.eval_shape(lambda: init_params(hyper, seed))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        name = getattr(path[-1], "key", None)
        if name == "matrix":
            return 2.0 * rng.normal(0.0, sum(leaf.shape) ** -0.5, leaf.shape)
        if name == "idt":
            return rng.normal(0.1, 0.001, leaf.shape)
        assert name == "bias", path
        return rng.normal(0.0, 1.0, leaf.shape)

    return jax.tree_util.tree_map_with_path(draw, shapes)


@functools.cache
def model(variant, kind="sym"):
    hyper = HYPERS[variant]
    rng = np.random.default_rng([VARIANTS.index(variant), kind == "asym"])
    return Model(hyper, random_params(hyper, 1 + VARIANTS.index(variant)), make_stats(hyper, rng, kind))


def _sample(rng, n, draw, dist, min_dist=0.95):
    pts = []
    while len(pts) < n:
        p = draw()
        if all(dist(p, q) >= min_dist for q in pts):
            pts.append(p)
    return np.array(pts)


BOX = np.array([[6.9, 0.0, 0.0], [1.3, 6.6, 0.0], [-0.9, 1.1, 6.8]])  # triclinic, widths > rcut
ATYPE = np.array([0] * 8 + [1] * 16)
ATYPE_CLUSTER = np.array([0] * 4 + [1] * 8)


@functools.cache
def pbc_geometry():
    """24 atoms (8 O, 16 H) in a triclinic box, some of them outside the cell (unwrapped); min dist 0.95 Å."""
    rng = np.random.default_rng(42)
    images = np.array([[a, b, c] for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)]) @ BOX

    def dist(p, q):
        return np.min(np.linalg.norm(p - q + images, axis=-1))

    coord = _sample(rng, len(ATYPE), lambda: rng.uniform(0, 1, 3) @ BOX, dist)
    coord[:5] += np.array([[1, 0, 0], [0, -1, 0], [0, 0, 1], [-1, 1, 0], [1, 1, -1]]) @ BOX
    return coord


@functools.cache
def cluster_geometry():
    """12 atoms (4 O, 8 H) within ~3 Å, no PBC."""
    rng = np.random.default_rng(7)
    return _sample(rng, len(ATYPE_CLUSTER), lambda: rng.uniform(-2.6, 2.6, 3), lambda p, q: np.linalg.norm(p - q))


def system(pbc):
    return (pbc_geometry(), BOX, ATYPE) if pbc else (cluster_geometry(), None, ATYPE_CLUSTER)


def random_rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


# ----------------------------------------------------------------------------------------------------
# finite differences
# ----------------------------------------------------------------------------------------------------


def fd_forces(m, coord, box, atype, nl, atoms):
    """−∂E/∂r_ac by central differences for a in atoms, c in xyz: (len(atoms), 3)."""
    frames = []
    for a in atoms:
        for c in range(3):
            for sgn in (1.0, -1.0):
                x = coord.copy()
                x[a, c] += sgn * H
                frames.append(x)
    boxes = None if box is None else np.repeat(box[None], len(frames), axis=0)
    e = m.energies(np.stack(frames), boxes, atype, nl)
    return (-(e[0::2] - e[1::2]) / (2 * H)).reshape(len(atoms), 3)


def fd_virial(m, coord, box, atype, nl):
    """V[k, j] = −∂E/∂ε_jk by central differences, r → r(I + ε), box → box(I + ε)."""
    coords, boxes = [], []
    for j in range(3):
        for k in range(3):
            for sgn in (1.0, -1.0):
                S = np.eye(3)
                S[j, k] += sgn * H
                coords.append(coord @ S)
                boxes.append(None if box is None else box @ S)
    e = m.energies(np.stack(coords), None if box is None else np.stack(boxes), atype, nl)
    dE = ((e[0::2] - e[1::2]) / (2 * H)).reshape(3, 3)  # dE[j, k] = ∂E/∂ε_jk
    return -dE.T


def assert_close(actual, expected, rtol, what):
    """max |a − e| ≤ rtol · max |e|."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = np.max(np.abs(expected))
    err = np.max(np.abs(actual - expected))
    assert err <= rtol * scale, f"{what}: max abs error {err:.3e} > {rtol:g} × {scale:.3e}\n{actual}\n{expected}"


# ----------------------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sym", "asym"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_force_is_minus_energy_gradient(variant, kind):
    m = model(variant, kind)
    coord, box, atype = system(True)
    nl = neighbors(coord, box, atype, m.hyper)
    out = m.predict(coord, box, atype, nl)
    assert np.max(np.abs(out.force)) > 0.1, "forces too small to test anything"
    atoms = [0, 9, 23]  # O, H (both wrapped and unwrapped atoms are in the list: 0 is outside the cell)
    assert_close(fd_forces(m, coord, box, atype, nl, atoms), out.force[atoms], 1e-6, "force vs −dE/dr")
    assert np.isclose(out.energy, out.atom_energy.sum(), rtol=1e-13)


def test_force_is_minus_energy_gradient_no_pbc():
    m = model("one_side", "asym")
    coord, box, atype = system(False)
    nl = neighbors(coord, box, atype, m.hyper)
    out = m.predict(coord, box, atype, nl)
    atoms = [1, 4, 11]
    assert_close(fd_forces(m, coord, box, atype, nl, atoms), out.force[atoms], 1e-6, "force vs −dE/dr (no PBC)")


@pytest.mark.parametrize("kind", ["sym", "asym"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_virial_is_minus_strain_derivative(variant, kind):
    m = model(variant, kind)
    coord, box, atype = system(True)
    nl = neighbors(coord, box, atype, m.hyper)
    V = m.predict(coord, box, atype, nl).virial.reshape(3, 3)
    asym = np.max(np.abs(V - V.T)) / np.max(np.abs(V))
    if kind == "asym":
        assert asym > 1e-2, "the asymmetric model should have an asymmetric virial (layout test)"
    else:
        assert asym < 1e-10, "a rotation-invariant model has a symmetric virial"
    assert_close(V, fd_virial(m, coord, box, atype, nl), 1e-6, "virial vs −dE/dε (layout V[k, j] = Σ F_k r_j)")


@pytest.mark.parametrize("kind", ["sym", "asym"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_virial_and_force_from_pair_gradients(variant, kind):
    """Independently of predict's strain derivative: with g = ∂E/∂d for every pair (slot),
    V[k, j] = −Σ_pairs g_k d_j and F_i = Σ_(pairs centred on i) g − Σ_(pairs whose neighbour is i) g."""
    m = model(variant, kind)
    coord, box, atype = system(True)
    nl = neighbors(coord, box, atype, m.hyper)
    out = m.predict(coord, box, atype, nl)
    d, g, idx = m.dE_dd(coord, box, atype, nl)
    mask = idx >= 0
    assert np.all(g[~mask] == 0), "empty slots must not depend on d"
    V = -np.einsum("isk,isj->kj", g * mask[..., None], d)
    assert_close(out.virial.reshape(3, 3), V, 1e-10, "virial vs −Σ g ⊗ d")
    F = g.sum(axis=1)
    np.add.at(F, idx[mask], -g[mask])
    assert_close(out.force, F, 1e-10, "force vs pair-gradient assembly")


def test_virial_no_pbc_is_sum_f_r():
    """Without PBC the virial is exactly Σ_i F_i ⊗ r_i, V[k, j] = Σ_i F_ik r_ij (asymmetric model)."""
    m = model("one_side", "asym")
    coord, box, atype = system(False)
    nl = neighbors(coord, box, atype, m.hyper)
    out = m.predict(coord, box, atype, nl)
    V = out.virial.reshape(3, 3)
    assert np.max(np.abs(V - V.T)) > 1e-2 * np.max(np.abs(V))
    assert_close(V, np.einsum("ik,ij->kj", out.force, coord), 1e-10, "virial vs Σ F_k r_j")
    assert_close(V, fd_virial(m, coord, box, atype, nl), 1e-6, "virial vs −dE/dε (no PBC)")


@pytest.mark.parametrize("variant,pbc", CASES, ids=CASE_IDS)
def test_translation_invariance(variant, pbc):
    m = model(variant, "asym")  # translation invariance holds for any statistics
    coord, box, atype = system(pbc)
    ref = m.predict(coord, box, atype)
    moved = coord + np.array([3.7, -12.2, 0.41])
    out = m.predict(moved, box, atype)
    assert np.isclose(out.energy, ref.energy, rtol=1e-12)
    assert_close(out.force, ref.force, 1e-10, "forces after translation")
    assert_close(out.atom_energy, ref.atom_energy, 1e-12, "atomic energies after translation")
    if pbc:
        assert_close(out.virial, ref.virial, 1e-10, "virial after translation")


@pytest.mark.parametrize("variant,pbc", CASES, ids=CASE_IDS)
def test_rotation_invariance(variant, pbc):
    m = model(variant, "sym")
    coord, box, atype = system(pbc)
    ref = m.predict(coord, box, atype)
    Q = random_rotation(np.random.default_rng(5))
    out = m.predict(coord @ Q, None if box is None else box @ Q, atype)
    assert np.isclose(out.energy, ref.energy, rtol=1e-12)
    assert_close(out.atom_energy, ref.atom_energy, 1e-11, "atomic energies after rotation")
    assert_close(out.force, ref.force @ Q, 1e-10, "forces rotate with the system")
    V, V0 = out.virial.reshape(3, 3), ref.virial.reshape(3, 3)
    assert_close(V, Q.T @ V0 @ Q, 1e-10, "virial rotates as Qᵀ V Q")
    # the asymmetric statistics break it (the test can see a broken model)
    ma = model(variant, "asym")
    ea = ma.predict(coord, box, atype).energy
    assert not np.isclose(ma.predict(coord @ Q, None if box is None else box @ Q, atype).energy, ea, rtol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_permutation_invariance(variant):
    m = model(variant, "asym")  # holds for any statistics that are the same for every slot
    coord, box, atype = system(True)
    ref = m.predict(coord, box, atype)
    rng = np.random.default_rng(9)
    # within each type
    perm = np.arange(len(atype))
    for t in (0, 1):
        sel = np.flatnonzero(atype == t)
        perm[sel] = rng.permutation(sel)
    assert np.array_equal(atype[perm], atype)
    # across types, with atype permuted along
    for p in (perm, rng.permutation(len(atype))):
        out = m.predict(coord[p], box, atype[p])
        assert np.isclose(out.energy, ref.energy, rtol=1e-12)
        assert_close(out.force, ref.force[p], 1e-10, "forces follow the permutation")
        assert_close(out.atom_energy, ref.atom_energy[p], 1e-12, "atomic energies follow the permutation")
        assert_close(out.virial, ref.virial, 1e-10, "virial after permutation")


@pytest.mark.parametrize("variant", VARIANTS)
def test_periodic_wrapping_changes_nothing(variant):
    m = model(variant, "asym")
    coord, box, atype = system(True)
    ref = m.predict(coord, box, atype)
    one = coord.copy()
    one[3] += box[0] - 2 * box[2]  # one atom by a lattice vector
    frac = coord @ np.linalg.inv(box)
    wrapped = coord - np.floor(frac) @ box  # every atom into the cell
    scattered = coord + np.random.default_rng(1).integers(-2, 3, (len(coord), 3)) @ box
    for name, c in [("one atom", one), ("all wrapped", wrapped), ("all scattered", scattered)]:
        out = m.predict(c, box, atype)
        assert np.isclose(out.energy, ref.energy, rtol=1e-12), name
        assert_close(out.force, ref.force, 1e-10, f"forces, {name}")
        assert_close(out.virial, ref.virial, 1e-10, f"virial, {name}")


@pytest.mark.parametrize("variant,pbc", CASES, ids=CASE_IDS)
def test_net_force_and_torque(variant, pbc):
    """Σ F = 0 (PBC and not); without PBC also Σ r × F = 0 (rotation invariance)."""
    m = model(variant, "sym")
    coord, box, atype = system(pbc)
    F = m.predict(coord, box, atype).force
    assert np.max(np.abs(F.sum(axis=0))) <= 1e-12 * len(F) * np.max(np.abs(F))
    if not pbc:
        torque = np.cross(coord - coord.mean(0), F).sum(axis=0)
        assert np.max(np.abs(torque)) <= 1e-11 * len(coord) * np.max(np.abs(F))


def test_deepmd_fixture_gradients():
    """DeePMD-kit's cu_virial model as imported: forces and virial are the energy's derivatives."""
    from fixture_models import load_fixture

    hyper, params, stats, p = load_fixture("cu_virial")
    m = Model(hyper, params, stats)
    coord, box, atype = np.asarray(p["coord"][0]), np.asarray(p["box"][0]), np.asarray(p["atype"])
    nl = neighbors(coord, box, atype, hyper)
    out = m.predict(coord, box, atype, nl)
    assert np.isclose(out.energy, p["energy"][0], rtol=1e-10)
    atoms = [0, 13, 31]
    assert_close(fd_forces(m, coord, box, atype, nl, atoms), out.force[atoms], 1e-6, "cu_virial force vs −dE/dr")
    assert_close(out.force[atoms], p["force"][0][atoms], 1e-8, "cu_virial force vs DeePMD-kit")
    assert_close(out.virial.reshape(3, 3), fd_virial(m, coord, box, atype, nl), 1e-6, "cu_virial virial vs −dE/dε")
