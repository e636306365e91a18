"""Every way a trained se_atten_v2 model is used outside training, on one tiny model trained here (Mg/Al/Cu,
:mod:`se_atten_case`): ``test``, ``freeze`` (ours, DeePMD-kit's .dp / .yaml, the refused .pb), ``convert-deepmd``,
``neighbor-stat --mixed-type``, the notebook API, the ASE calculator, jax-md and ``jax.export``. Each gives the
model's own predictions (:meth:`Model.predict <jaxmd_dp.model.trained.Model.predict>`).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from deepmd_cases import same_model
from fixture_models import max_rel
from se_atten_case import ALMGCU, NFRAMES, TRAIN
from shared_paths import require

from jaxmd_dp.cli import convert_deepmd, freeze
from jaxmd_dp.cli import neighbor_stat as nstat
from jaxmd_dp.cli import test as dptest
from jaxmd_dp.cli.util import run_cli
from jaxmd_dp.model.io import load_model

TOL = 1e-10


def _model(run):
    return run.model.hyper, run.model.params, run.model.stats


@pytest.fixture(scope="module")
def frozen(tiny_v2, tmp_path_factory):
    """The run frozen to each of our model files and DeePMD-kit's (suffix → path)."""
    d = tmp_path_factory.mktemp("frozen")
    out = {}
    for suffix in (".jaxdp", ".dp", ".yaml"):
        out[suffix] = d / f"model{suffix}"
        assert run_cli(freeze.main, ["-m", str(tiny_v2.out), "-o", str(out[suffix])]) == 0
    return out


def _rmse(text: str, label: str) -> float:
    return float(text.split(f"{label} RMSE        :")[1].split()[0])


@pytest.mark.parametrize("source", ["run", ".dp"])
def test_test_command(tiny_v2, frozen, source, capsys):
    """``test -m RUN|model.dp -s SYSTEM -n 2``: the RMSEs of the model's predictions against the labels."""
    model = str(tiny_v2.out) if source == "run" else str(frozen[source])
    capsys.readouterr()
    assert run_cli(dptest.main, ["-m", model, "-s", str(tiny_v2.system), "-n", str(NFRAMES)]) == 0
    text = capsys.readouterr().out
    s = tiny_v2.system / "set.000"
    force = np.load(s / "force.npy")[:NFRAMES].reshape(tiny_v2.ours.force.shape)
    virial = np.load(s / "virial.npy")[:NFRAMES].reshape(NFRAMES, 9)
    assert _rmse(text, "Force ") == pytest.approx(np.sqrt(np.mean((tiny_v2.ours.force - force) ** 2)), rel=1e-6)
    assert _rmse(text, "Virial") == pytest.approx(np.sqrt(np.mean((tiny_v2.ours.virial - virial) ** 2)), rel=1e-6)


def test_frozen_files_and_convert_deepmd_read_back_bit_for_bit(tiny_v2, frozen, tmp_path):
    for path in frozen.values():
        same_model(load_model(path), _model(tiny_v2))
    back = tmp_path / "converted"
    assert run_cli(convert_deepmd.main, [str(frozen[".dp"]), "-o", str(back)]) == 0
    same_model(load_model(back), _model(tiny_v2))


def test_pb_is_refused_with_the_route(tiny_v2, tmp_path, capsys):
    """DeePMD-kit's TensorFlow backend cannot deserialise se_atten_v2: one line naming the formats that hold it."""
    capsys.readouterr()
    assert run_cli(freeze.main, ["-m", str(tiny_v2.out), "-o", str(tmp_path / "model.pb")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "TensorFlow backend cannot hold se_atten_v2" in err[0] and "freeze -o model.dp" in err[0]
    assert "dp convert-backend model.dp model.pth" in err[0]
    assert not list(tmp_path.iterdir())


def test_neighbor_stat_mixed_type_is_deepmd_kits(capsys):
    """``neighbor-stat --mixed-type``: DeePMD-kit's ``dp neighbor-stat --mixed-type`` numbers (its NeighborStat
    with ``mixed_type``): the most neighbours of any type one atom has, one number (not the sum of the per-type
    most); without it, the per-type most."""
    from deepmd.dpmodel.utils.neighbor_stat import NeighborStat
    from deepmd.utils.data_system import DeepmdDataSystem

    systems = [str(require(ALMGCU) / s) for s in TRAIN]
    type_map = ["Mg", "Al", "Cu"]
    data = DeepmdDataSystem(systems, 1, 1, rcut=6.0, type_map=type_map)
    data.get_batch()
    got = {}
    for flags, mixed in (([], False), (["--mixed-type"], True)):
        capsys.readouterr()
        assert run_cli(nstat.main, ["-s", *systems, "-r", "6", "-t", *type_map, "--json", *flags]) == 0
        got[mixed] = json.loads(capsys.readouterr().out)
        dist, most = NeighborStat(3, 6.0, mixed_type=mixed).get_stat(data)
        assert got[mixed]["max_nbor_size"] == np.asarray(most).tolist()
        assert got[mixed]["min_nbor_dist"] == pytest.approx(dist, rel=1e-10)
    (n,) = got[True]["max_nbor_size"]
    assert n < sum(got[False]["max_nbor_size"]) and got[True]["sel"] == [4 * -(-int(np.ceil(n * 1.1)) // 4)]


def test_api(tiny_v2, frozen):
    """``load_model`` of the run, the .jaxdp and the .dp, and ``as_model`` of the Trainer and of (hyper, params,
    stats): the same predictions, bit for bit."""
    from jaxmd_dp.api import as_model
    from jaxmd_dp.api import load_model as api_load

    models = [api_load(tiny_v2.out), api_load(frozen[".jaxdp"]), api_load(frozen[".dp"])]
    models += [as_model(tiny_v2.trainer), as_model(_model(tiny_v2))]
    for m in models:
        pred = m.predict(tiny_v2.coord, tiny_v2.box, tiny_v2.atype)
        for key in ("energy", "force", "virial", "atom_energy"):
            assert np.array_equal(np.asarray(getattr(pred, key)), getattr(tiny_v2.ours, key)), key


def test_ase_calculator(tiny_v2, frozen):
    from ase import Atoms

    from jaxmd_dp.md import DPCalculator

    names = [tiny_v2.model.type_map[t] for t in tiny_v2.atype]
    atoms = Atoms(names, positions=tiny_v2.coord[0], cell=tiny_v2.box[0], pbc=True)
    atoms.calc = DPCalculator(frozen[".dp"])
    ours = tiny_v2.ours
    assert atoms.get_potential_energy() == pytest.approx(ours.energy[0], rel=TOL)
    assert max_rel(atoms.get_forces(), ours.force[0]) <= TOL
    assert max_rel(atoms.get_potential_energies(), ours.atom_energy[0]) <= TOL
    stress = -ours.virial[0].reshape(3, 3) / atoms.get_volume()
    voigt = stress[[0, 1, 2, 1, 0, 0], [0, 1, 2, 2, 2, 1]]
    assert max_rel(atoms.get_stress(), voigt) <= TOL


def test_jax_md(tiny_v2):
    """The jax-md energy with its MD neighbour list (the nearest ``sel`` of any type within rcut) and without:
    the model's energy and forces; a short NVE run keeps the total energy."""
    import jax
    import jax.numpy as jnp

    from jaxmd_dp import md

    neighbor_fn, energy = md.energy_fn(tiny_v2.model, tiny_v2.box[0], tiny_v2.atype)
    R = jnp.asarray(tiny_v2.coord[0])
    nbrs = neighbor_fn.allocate(R)
    assert len(nbrs.spec.sel) == 1  # one section: neighbours of any type
    ours = tiny_v2.ours
    e, grad = jax.jit(jax.value_and_grad(lambda r, nb: energy(r, neighbor=nb)))(R, nbrs)
    assert float(e) == pytest.approx(ours.energy[0], rel=TOL)
    assert max_rel(-grad, ours.force[0]) <= TOL
    assert float(energy(R)) == pytest.approx(ours.energy[0], rel=TOL)
    mass = md.masses(tiny_v2.model.type_map, tiny_v2.atype)
    run = md.run_nve(energy, neighbor_fn, R, mass, dt_fs=0.5, steps=4, record_every=2)
    assert np.all(np.isfinite(run.total)) and np.ptp(run.total) < 1e-4  # eV, 32 atoms over 2 fs
    assert not run.neighbors.did_buffer_overflow


def test_jax_export(tiny_v2, tmp_path):
    """``freeze --export --natoms 32``: the exported function gives the model's predictions."""
    from jaxmd_dp.export.jax_export import load_exported

    path = tmp_path / "model.jaxdp"
    natoms = len(tiny_v2.atype)
    assert run_cli(freeze.main, ["-m", str(tiny_v2.out), "-o", str(path), "--export", "--natoms", str(natoms)]) == 0
    pred = load_exported(path)(tiny_v2.coord, tiny_v2.box, tiny_v2.atype)
    for key in ("energy", "force", "virial", "atom_energy"):
        assert max_rel(getattr(pred, key), getattr(tiny_v2.ours, key)) <= TOL, key
    assert pred.nneigh_max.shape == (1,) and 0 < pred.nneigh_max[0] <= tiny_v2.model.hyper.sel[0]
