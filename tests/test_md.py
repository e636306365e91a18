"""MD with trained models: the jax-md energy function and neighbour list, NVE energy conservation, the
ASE calculator. Models are DeePMD-kit's reference fixtures (../shared/fixtures), so the energies are checked
against DeePMD-kit's own numbers."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_models import load_fixture, max_rel

from jaxmd_dp import md
from jaxmd_dp.errors import InputError
from jaxmd_dp.model.trained import Model

jax_md = pytest.importorskip("jax_md", reason="jax-md not installed (pip install -e '.[md]')")
from jax_md import simulate, space, units  # noqa: E402

pytest.importorskip("ase", reason="ase not installed (pip install -e '.[md]')")


def _model(name):
    hyper, params, stats, p = load_fixture(name)
    return (hyper, params, stats), p


def _frame(p, i=0):
    box = p["box"][i] if "box" in p else None
    return np.asarray(p["coord"][i], np.float64), box, np.asarray(p["atype"])


class Cu:
    """DeePMD-kit's Cu fixture model (cheap to compile) on its triclinic 32-atom frames (7.7 Å box, so rcut
    6 Å > L/2: several images of one atom are neighbours), with the MD energy function and its jitted
    pieces shared by the tests below."""

    def __init__(self):
        self.model, self.p = _model("cu_virial")
        self.R, self.box, self.atype = _frame(self.p, 1)
        self.skin = 0.5
        self.nfn, self.energy = md.energy_fn(self.model, self.box, self.atype, skin=self.skin)
        self.with_list = jax.jit(jax.value_and_grad(lambda r, nb: self.energy(r, neighbor=nb)))
        self.exact = jax.jit(jax.value_and_grad(self.energy))  # a fresh, exact list at every call
        self.update = jax.jit(self.nfn.update)


@pytest.fixture(scope="module")
def cu():
    return Cu()


# ------------------------------------------------------------------------------------------------ units
def test_units_match_jax_md_metal():
    u = units.metal_unit_system()
    assert md.FS == pytest.approx(float(u["time"]) / 1000, rel=1e-7)  # 1 fs = 0.0982269 (amu, Å, eV) units
    assert md.FS == pytest.approx(0.09822694788, rel=1e-8)
    assert md.KB == pytest.approx(float(u["temperature"]), rel=1e-6)
    np.testing.assert_allclose(md.masses(["O", "H"], [0, 1, 1]), [15.999, 1.008, 1.008])


# ------------------------------------------------------------------------------------------------ energy_fn
def test_energy_fn_matches_deepmd_kit(cu):
    """Energy and forces, with the MD list and with the built-in exact list, equal DeePMD-kit's; so do
    positions moved by whole cell vectors (the list tracks image jumps)."""
    nbrs = cu.nfn.allocate(cu.R)
    assert not nbrs.did_buffer_overflow
    e_ref, f_ref = cu.p["energy"][1], cu.p["force"][1]
    for e, g in (cu.with_list(cu.R, nbrs), cu.exact(cu.R)):
        assert abs(float(e) - e_ref) <= 1e-10 * abs(e_ref)
        assert max_rel(-g, f_ref) <= 1e-10
    Rw = cu.R + np.random.default_rng(0).integers(-2, 3, size=(len(cu.R), 3)) @ cu.box
    e, g = cu.with_list(Rw, nbrs)
    assert abs(float(e) - e_ref) <= 1e-10 * abs(e_ref)
    assert max_rel(-g, f_ref) <= 1e-10


def test_skin_list_stays_exact_and_rebuilds(cu):
    """After moves below skin/2 the old list still gives the exact energy and forces; ``update`` keeps it, and
    rebuilds once an atom has moved more than skin/2."""
    nbrs = cu.nfn.allocate(cu.R)
    step = np.random.default_rng(1).normal(size=cu.R.shape)
    step *= 0.45 * cu.skin / np.linalg.norm(step, axis=1).max()  # every atom moves < skin/2
    R1 = cu.R + step
    (e1, g1), (x1, h1) = cu.with_list(R1, nbrs), cu.exact(R1)
    assert abs(float(e1 - x1)) <= 1e-10 * abs(float(x1)) and max_rel(g1, h1) <= 1e-10
    kept = cu.update(R1, nbrs)
    np.testing.assert_array_equal(kept.reference_position, nbrs.reference_position)  # no rebuild
    R2 = R1.copy()
    R2[5] += [0.6 * cu.skin, 0, 0]  # one atom past skin/2
    rebuilt = cu.update(R2, kept)
    np.testing.assert_array_equal(rebuilt.reference_position, R2)
    assert not rebuilt.did_buffer_overflow
    (e2, g2), (x2, h2) = cu.with_list(R2, rebuilt), cu.exact(R2)
    assert abs(float(e2 - x2)) <= 1e-10 * abs(float(x2)) and max_rel(g2, h2) <= 1e-10


def test_overflow_flag_and_reallocate(cu):
    """More neighbours than the allocated slots raise the (sticky) overflow flag; allocate again."""
    nfn, _ = md.energy_fn(cu.model, None, cu.atype, skin=0.5, capacity_factor=1.0)  # a Cu cluster, no PBC
    nbrs = nfn.allocate(2.0 * cu.R)  # allocated for a dilute cluster ...
    squeezed = jax.jit(nfn.update)(cu.R, nbrs)  # ... then twice as dense: more neighbours within rcut + skin
    assert bool(squeezed.did_buffer_overflow)
    again = nfn.allocate(cu.R)
    assert not again.did_buffer_overflow and sum(again.max_occupancy) > sum(nbrs.max_occupancy)


def test_bad_types_rejected(cu):
    with pytest.raises(InputError, match="atom types"):
        md.energy_fn(cu.model, cu.box, np.full_like(cu.atype, 1))
    with pytest.raises(InputError, match="not in the model's type_map"):
        md.energy_fn(cu.model, cu.box, ["Ag"] * len(cu.atype))


def test_energy_fn_takes_a_model_and_chemical_symbols(cu, tmp_path):
    """A Model (or its path) with the atoms' chemical symbols gives DeePMD-kit's energy and forces."""
    model = Model(*cu.model)
    symbols = [model.type_map[t] for t in cu.atype]
    for m in (model, str(model.save(tmp_path / "cu.jaxdp"))):
        _, energy = md.energy_fn(m, cu.box, symbols)
        e, g = jax.jit(jax.value_and_grad(energy))(cu.R)
        assert abs(float(e) - cu.p["energy"][1]) <= 1e-10 * abs(cu.p["energy"][1])
        assert max_rel(-g, cu.p["force"][1]) <= 1e-10


def test_md_imports_without_ase():
    """Importing jaxmd_dp.md needs no ASE; DPCalculator then says what to install."""
    code = (
        "import sys; sys.modules['ase'] = None\n"
        "from jaxmd_dp import md\n"
        "assert callable(md.energy_fn) and callable(md.run_nve) and md.FS > 0\n"
        "try:\n    md.DPCalculator\nexcept ImportError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "DPCalculator needs ASE" in r.stdout


# ------------------------------------------------------------------------------------------------ NVE
def _check_conservation(run, tol):
    d = run.drift_per_atom()
    assert not run.neighbors.did_buffer_overflow
    assert np.all(np.isfinite(run.total))
    assert d["max_dev"] <= tol, f"energy not conserved: {d} eV/atom (tolerance {tol})"
    return d


def _water_box_nve(steps, record_every):
    """DeePMD-kit's water model (imported), the 192-atom periodic box of water data_3 (fixture frame 0),
    velocity Verlet with 0.5 fs steps in float64, masses O 15.999, H 1.008 amu, Maxwell-Boltzmann velocities
    at 300 K (seed 0): max |E(t) − E(0)| ≤ 1e-4 eV/atom."""
    model, p = _model("water_se_e2_a")
    R, box, atype = _frame(p)
    nfn, energy = md.energy_fn(model, box, atype)
    run = md.run_nve(
        energy,
        nfn,
        R,
        md.masses(model[0].type_map, atype),
        dt_fs=0.5,
        steps=steps,
        temperature_K=300.0,
        seed=0,
        record_every=record_every,
    )
    assert run.temperature[0] == pytest.approx(300, rel=0.1)
    d = _check_conservation(run, 1e-4)
    print(
        f"\n192-atom water box, {steps} x 0.5 fs: {d} eV/atom, T {run.temperature[0]:.0f} -> "
        f"{run.temperature[-1]:.0f} K"
    )
    return run


def test_nve_water_fixture_conserves_energy():
    """1,000 steps of 0.5 fs (500 fs) of the water box conserve the energy to 1e-4 eV/atom."""
    _water_box_nve(1000, 50)


def test_nve_triclinic_wrapped_positions(cu):
    """jax-md's wrapping shift (``space.periodic_general``, triclinic) from unwrapped starting positions, a
    small skin so the list is rebuilt on the way: energy conserved, and the last energy equals a fresh
    exact evaluation."""
    nfn, energy = md.energy_fn(cu.model, cu.box, cu.atype, skin=0.1)
    _, shift = space.periodic_general(cu.box.T, fractional_coordinates=False)  # jax-md: columns = cell vectors
    R0 = cu.R + np.random.default_rng(2).integers(-1, 2, size=(len(cu.R), 3)) @ cu.box
    run = md.run_nve(
        energy,
        nfn,
        R0,
        md.masses(["Cu"], cu.atype),
        dt_fs=1.0,
        steps=60,
        temperature_K=600.0,
        seed=1,
        record_every=20,
        shift_fn=shift,
    )
    _check_conservation(run, 1e-4)
    Rf = np.asarray(run.state.position)
    frac = Rf @ np.linalg.inv(cu.box)
    assert np.all((frac > -1e-9) & (frac < 1 + 1e-9)), "positions were wrapped into the cell"
    assert not np.allclose(run.neighbors.reference_position, R0), "the list was rebuilt"
    assert run.potential[-1] == pytest.approx(float(cu.exact(Rf)[0]), rel=1e-12)


def test_nvt_nose_hoover_runs(cu):
    """The energy function and list work with jax-md's other integrators (Nosé-Hoover NVT here)."""
    _, shift = space.free()
    init, apply = simulate.nvt_nose_hoover(cu.energy, shift, 1.0 * md.FS, kT=300 * md.KB)
    nbrs = cu.nfn.allocate(cu.R)
    state = init(jax.random.PRNGKey(0), jnp.asarray(cu.R), mass=jnp.asarray(md.masses(["Cu"], cu.atype)), neighbor=nbrs)

    @jax.jit
    def steps(state, nbrs):
        def body(_, c):
            s, nb = c
            s = apply(s, neighbor=nb)
            return s, nb.update(s.position)

        return jax.lax.fori_loop(0, 10, body, (state, nbrs))

    state, nbrs = steps(state, nbrs)
    assert np.all(np.isfinite(np.asarray(state.position))) and not nbrs.did_buffer_overflow
    assert not np.allclose(np.asarray(state.position), cu.R)


# ------------------------------------------------------------------------------------------------ ASE
def _atoms(p, i=0):
    from ase import Atoms

    R, box, atype = _frame(p, i)
    symbols = [str(p["type_map"][t]) for t in atype]
    return Atoms(symbols, positions=R) if box is None else Atoms(symbols, positions=R, cell=box, pbc=True)


def test_ase_calculator_periodic_forces_and_stress(cu):
    """Triclinic Cu (rcut > L/2): energy and forces equal the model's (and DeePMD-kit's); stress is
    −virial/volume in ASE's Voigt order (xx, yy, zz, yz, xz, xy) and equals ASE's finite-difference stress."""
    from ase.stress import full_3x3_to_voigt_6_stress

    p = cu.p
    atoms = _atoms(p, 2)
    atoms.calc = md.DPCalculator(cu.model)
    pred = Model(*cu.model).evaluator(p["coord"][2][None], p["box"][2][None], p["atype"])
    assert atoms.get_potential_energy() == pytest.approx(pred.energy[0], rel=1e-12)
    assert atoms.get_potential_energy() == pytest.approx(p["energy"][2], rel=1e-10)
    np.testing.assert_allclose(atoms.get_forces(), pred.force[0], rtol=0, atol=1e-12)
    assert max_rel(atoms.get_forces(), p["force"][2]) <= 1e-10
    np.testing.assert_allclose(atoms.get_potential_energies().sum(), pred.energy[0], rtol=1e-12)
    expected = -pred.virial[0].reshape(3, 3) / atoms.get_volume()
    stress = atoms.get_stress()
    np.testing.assert_allclose(stress, full_3x3_to_voigt_6_stress(expected), rtol=0, atol=1e-12)
    np.testing.assert_allclose(stress[:3], np.diag(expected), atol=1e-12)
    np.testing.assert_allclose(stress[3:], [expected[1, 2], expected[0, 2], expected[0, 1]], atol=1e-9)
    assert max_rel(stress, -p["virial"][2][[0, 4, 8, 5, 2, 1]] / atoms.get_volume()) <= 1e-9  # DeePMD-kit's
    with pytest.warns(FutureWarning):  # (ASE prefers FiniteDifferenceCalculator; same numbers)
        numerical = atoms.calc.calculate_numerical_stress(atoms, d=1e-5)
    np.testing.assert_allclose(stress, numerical, atol=1e-7)


def test_ase_calculator_non_periodic(tmp_path):
    """A molecule without a cell: energy and forces equal DeePMD-kit's, there is no stress; atoms in any
    order map to types by element; a model path works; unknown elements and mixed pbc are refused."""
    from ase import Atoms
    from ase.calculators.calculator import PropertyNotImplementedError

    from jaxmd_dp.model.io import save_model

    model, p = _model("nopbc_cho")
    atoms = _atoms(p, 1)
    atoms.calc = md.DPCalculator(model)
    assert atoms.get_potential_energy() == pytest.approx(p["energy"][1], rel=1e-12)
    assert max_rel(atoms.get_forces(), p["force"][1]) <= 1e-10
    with pytest.raises(PropertyNotImplementedError):
        atoms.get_stress()
    atoms.set_cell([30, 30, 30])  # a cell with pbc=False is still non-periodic
    assert atoms.get_potential_energy() == pytest.approx(p["energy"][1], rel=1e-12)

    order = np.random.default_rng(0).permutation(len(atoms))
    shuffled = _atoms(p, 0)[order]
    shuffled.calc = md.DPCalculator(str(save_model(tmp_path / "cho", *model)))
    assert shuffled.get_potential_energy() == pytest.approx(p["energy"][0], rel=1e-12)
    np.testing.assert_allclose(shuffled.get_forces(), p["force"][0][order], atol=1e-10)

    bad = Atoms("CuH", positions=[[0, 0, 0], [0, 0, 1.5]])
    bad.calc = md.DPCalculator(model)
    with pytest.raises(InputError, match="not in the model's type_map"):
        bad.get_potential_energy()
    mixed = _atoms(p, 0)
    mixed.set_cell([20, 20, 20])
    mixed.pbc = [True, True, False]
    mixed.calc = md.DPCalculator(model)
    with pytest.raises(PropertyNotImplementedError, match="periodic in all three"):
        mixed.get_potential_energy()


def test_ase_md_with_calculator(cu):
    """ASE's own velocity Verlet with DPCalculator conserves energy too (short run)."""
    from ase import units as ase_units
    from ase.md.verlet import VelocityVerlet

    atoms = _atoms(cu.p, 1)
    atoms.calc = md.DPCalculator(Model(*cu.model))
    rng = np.random.default_rng(0)
    atoms.set_momenta(rng.normal(size=(len(atoms), 3)) * np.sqrt(atoms.get_masses()[:, None] * 600 * ase_units.kB))
    e0 = atoms.get_total_energy()
    VelocityVerlet(atoms, timestep=1.0 * ase_units.fs).run(20)
    assert abs(atoms.get_total_energy() - e0) / len(atoms) < 1e-4
