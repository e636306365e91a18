"""User tools: plot (learning curve PNG), freeze (one-file models, jax.export), neighbor_stat, the jaxmd-dp CLI,
and the training progress bar."""

import dataclasses
import io
import json
import math
import os
import stat
import zipfile

import jax
import numpy as np
import pytest
from shared_paths import require

from jaxmd_dp.cli import freeze, plot
from jaxmd_dp.cli import main as cli
from jaxmd_dp.cli import neighbor_stat as nstat
from jaxmd_dp.cli.util import run_cli
from jaxmd_dp.errors import InputError
from jaxmd_dp.export import jax_export as jexp
from jaxmd_dp.geometry import neighbor_stat as gns
from jaxmd_dp.model import io as mio
from jaxmd_dp.model.energy import ModelHyper, Stats, param_shapes
from jaxmd_dp.train import lcurve
from jaxmd_dp.train.progress import Progress

CU = "cu_asc22/iter.000000/02.fp/data.000"


def _one_line_error(capsys, argv, main, *words):
    assert run_cli(main, argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, err
    return err


# ---------------------------------------------------------------------------------------------- plot


def _write_lcurve(path, n=12, valid=True, virial=False):
    keys = ["rmse", "rmse_e", "rmse_f"] + (["rmse_v"] if virial else [])
    text = lcurve.header(keys, valid)
    for k in range(n):
        step = 0 if k == 0 else 100 * k
        train = {q: 2.0 * 0.8**k * (i + 1) for i, q in enumerate(keys)}
        val = {q: 2.5 * 0.8**k * (i + 1) for i, q in enumerate(keys)}
        if virial:
            val["rmse_v"] = math.nan  # no virial labels in validation: a NaN column, left out
        text += lcurve.line(step, train, val if valid else None, 1e-3 * 0.9**k)
    path.write_text(text)
    return path


def test_plot_png_size(tmp_path):
    import matplotlib.image

    lc = _write_lcurve(tmp_path / "lcurve.out", virial=True)
    cols = plot.read_lcurve(lc)
    assert set(cols) >= {"step", "rmse_e_trn", "rmse_e_val", "lr"} and len(cols["step"]) == 12
    assert plot.quantities(cols) == ["rmse", "rmse_e", "rmse_f", "rmse_v"]
    out = tmp_path / "fig" / "lc.png"
    assert run_cli(plot.main, [str(lc), "-o", str(out), "--dpi", "40"]) == 0
    img = matplotlib.image.imread(out)
    assert img.shape[:2] == (round((3.2 * 2 + 0.6) * 40), round(6.0 * 2 * 40))  # 2×2 panels at 40 dpi
    assert img[..., :3].std() > 0.05  # something was drawn
    # one quantity, train only (no validation): one panel, default output beside the input
    lc1 = tmp_path / "one.out"
    lc1.write_text(
        lcurve.header(["rmse_f"], False) + "".join(lcurve.line(s, {"rmse_f": 1.0 / s}, None, 1e-3) for s in range(1, 6))
    )
    assert plot.plot_lcurve(lc1, dpi=30) == tmp_path / "one.png"
    assert matplotlib.image.imread(tmp_path / "one.png").shape[:2] == (round(3.8 * 30), round(6.0 * 30))


def test_plot_bad_files(tmp_path, capsys):
    _one_line_error(capsys, [str(tmp_path / "missing.out")], plot.main, "missing.out", "no such")
    bad = tmp_path / "garbled.out"
    bad.write_text("hello world\n1 2 3\n")
    _one_line_error(capsys, [str(bad)], plot.main, "garbled.out")
    lc = _write_lcurve(tmp_path / "lc.out", n=3)
    lc.write_text(lc.read_text() + "    400   1.0e-01   abc   1 2 3 4 5\n")
    _one_line_error(capsys, [str(lc)], plot.main, "lc.out", "line 6")
    short = tmp_path / "short.out"
    short.write_text(lcurve.header(["rmse"], True) + "  1  2.0\n")
    _one_line_error(capsys, [str(short)], plot.main, "short.out", "columns")
    empty = tmp_path / "empty.out"
    empty.write_text(lcurve.header(["rmse"], True))
    _one_line_error(capsys, [str(empty)], plot.main, "empty.out", "no data")
    binary = tmp_path / "binary.out"
    binary.write_bytes(b"\x89PNG\xff\xfe\x00")
    _one_line_error(capsys, [str(binary)], plot.main, "binary.out")


# ---------------------------------------------------------------------------------------------- freeze


@pytest.fixture(scope="module")
def tiny_model():
    """A small se_e2_a model for Cu with random weights and statistics, and the Cu system."""
    from jaxmd_dp.data.system import load_system

    system = load_system(require(CU), ["Cu"])
    hyper = ModelHyper.from_deepmd(
        {
            "type_map": ["Cu"],
            "fitting_net": {"neuron": [8, 8]},
            "descriptor": {
                "type": "se_e2_a",
                "sel": [48],
                "rcut": 4.5,
                "rcut_smth": 2.0,
                "neuron": [4, 8],
                "axis_neuron": 2,
                "type_one_side": True,
            },
        }
    )
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(lambda s: rng.normal(0, 0.3, s.shape).astype(s.dtype), param_shapes(hyper))
    stats = Stats(rng.normal(0, 0.1, (1, 48, 4)), rng.uniform(0.5, 1.5, (1, 48, 4)), np.array([-3.5]))
    return hyper, params, stats, system


@pytest.fixture(scope="module")
def tiny_ref(tiny_model):
    """The Evaluator (compiled once) and its predictions on 3 Cu frames."""
    from jaxmd_dp.model.evaluate import Evaluator

    hyper, params, stats, system = tiny_model
    ev = Evaluator(hyper, params, stats)
    return ev, ev(system.coord[:3], system.box[:3], system.atype)


def _save_checkpoint(directory, hyper, params, stats, step):
    """A checkpoint laid out as the trainer's (state: step, params, stats; meta: hyper)."""
    from jaxmd_dp.train.checkpoint import Checkpointer

    ck = Checkpointer(directory, max_to_keep=2)
    ck.save(
        step,
        {"step": np.int64(step), "params": params, "stats": stats._asdict()},
        {"step": step, "hyper": hyper.to_dict()},
    )


def _assert_trees_identical(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


def test_freeze_checkpoint_roundtrip_bitwise(tmp_path, tiny_model, tiny_ref):
    from jaxmd_dp.train.checkpoint import load_model_from_checkpoint

    hyper, params, stats, system = tiny_model
    run = tmp_path / "run"
    _save_checkpoint(run / "model.ckpt", hyper, params, stats, step=7)
    out = tmp_path / "frozen.jaxdp"
    assert run_cli(freeze.main, ["-m", str(run), "-o", str(out)]) == 0
    assert zipfile.is_zipfile(out)
    meta = mio.read_meta(out)
    assert meta["format"] == mio.FORMAT and meta["version"] == mio.FORMAT_VERSION
    assert meta["hyper"]["type_map"] == ["Cu"] and meta["info"]["step"] == 7 and meta["exported"] is None

    h0, p0, s0 = load_model_from_checkpoint(run)
    h1, p1, s1 = mio.load_model(out)
    assert h1 == h0 == hyper
    _assert_trees_identical(p1, p0)
    _assert_trees_identical(s1, s0)

    # the checkpoint's and the frozen file's predictions, through the same compiled Evaluator (its
    # hyper-parameters are equal to both, asserted above)
    ev, _ = tiny_ref
    coord, box = system.coord[:3], system.box[:3]
    preds = []
    for p, s in ((p0, s0), (p1, s1)):
        ev.params, ev.stats = p, Stats(*(jax.numpy.asarray(x) for x in s))
        preds.append(ev(coord, box, system.atype))
    for a, b in zip(*preds):
        assert np.array_equal(a, b)  # bitwise
    assert np.isfinite(preds[0].energy).all() and np.abs(preds[0].force).max() > 0


def test_model_io_reads_frozen(tmp_path, tiny_model):
    """``load_model`` (dp test, --init-model) reads a frozen file as it reads a model directory."""
    from jaxmd_dp.model.io import load_model, save_model

    hyper, params, stats, _ = tiny_model
    save_model(tmp_path / "m", hyper, params, stats)
    assert run_cli(freeze.main, ["-m", str(tmp_path / "m"), "-o", str(tmp_path / "m.jaxdp")]) == 0
    h, p, s = load_model(tmp_path / "m.jaxdp")
    assert h == hyper
    _assert_trees_identical(p, params)
    _assert_trees_identical(s, stats)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_models_have_the_umask_modes(tmp_path, tiny_model, umask):
    """A frozen file and a model directory are written to temporaries (private, 0600 / 0700) and renamed:
    they end up as open / mkdir would make them under the umask, so a group can read a shared model."""
    from jaxmd_dp.model.io import save_model

    hyper, params, stats, _ = tiny_model
    old = os.umask(umask)
    try:
        d = save_model(tmp_path / "m", hyper, params, stats)
        f = mio.save_frozen(tmp_path / "m.jaxdp", hyper, params, stats)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o777 & ~umask
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o666 & ~umask


def test_frozen_bad_files(tmp_path, tiny_model, capsys):
    hyper, params, stats, _ = tiny_model
    garbage = tmp_path / "garbage.jaxdp"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="garbage.jaxdp.*not a zip"):
        mio.load_model(garbage)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("x.txt", "hi")
    with pytest.raises(InputError, match="other.zip.*no model.json"):
        mio.load_model(other)
    good = mio.save_frozen(tmp_path / "good.jaxdp", hyper, params, stats)
    future = tmp_path / "future.jaxdp"
    with zipfile.ZipFile(good) as zi, zipfile.ZipFile(future, "w") as zo:
        for name in zi.namelist():
            data = zi.read(name)
            if name == mio.META_NAME:
                meta = json.loads(data)
                meta["version"] = mio.FORMAT_VERSION + 1
                data = json.dumps(meta)
            zo.writestr(name, data)
    with pytest.raises(InputError, match="future.jaxdp.*newer"):
        mio.load_model(future)
    with pytest.raises(InputError, match="no exported function"):
        jexp.load_exported(good)
    _one_line_error(capsys, ["-m", str(tmp_path / "nope"), "-o", str(tmp_path / "x.jaxdp")], freeze.main, "nope")
    _one_line_error(capsys, ["-m", str(good), "-o", str(tmp_path / "x.jaxdp"), "--export"], freeze.main, "--natoms")


def test_freeze_export(tmp_path, tiny_model, tiny_ref):
    """The jax.export function in the frozen file equals the Evaluator's predictions, for any frame count."""
    from jaxmd_dp.model.io import save_model

    hyper, params, stats, system = tiny_model
    save_model(tmp_path / "m", hyper, params, stats)
    out = tmp_path / "exp.jaxdp"
    assert (
        run_cli(freeze.main, ["-m", str(tmp_path / "m"), "-o", str(out), "--export", "--natoms", str(system.natoms)])
        == 0
    )
    assert mio.read_meta(out)["exported"]["natoms"] == system.natoms
    f = jexp.load_exported(out)
    coord, box = system.coord[:3], system.box[:3]
    ref = tiny_ref[1]
    got = f(coord, box, system.atype)
    for k in ("energy", "force", "virial", "atom_energy"):
        np.testing.assert_allclose(getattr(got, k), getattr(ref, k), rtol=1e-12, atol=1e-12)
    assert int(got.nneigh_max[0]) > 0
    nf = f.exported.in_avals[0].shape[0]
    assert not isinstance(nf, int) and str(nf) == "nf"  # any number of frames (each new count compiles anew)
    with pytest.raises(InputError, match="exported for"):
        f(coord[:, :5], box, system.atype[:5])
    with pytest.raises(InputError, match="thick"):
        f(coord[:1], box[:1] * 0.5, system.atype)
    # the same file in the earlier layout (``frozen.json``, format "jaxmd_dp.frozen") gives the same function
    legacy = tmp_path / "legacy.jaxdp"
    with zipfile.ZipFile(out) as zi, zipfile.ZipFile(legacy, "w", zipfile.ZIP_DEFLATED) as zo:
        assert sorted(zi.namelist()) == sorted([mio.META_NAME, mio.WEIGHTS_NAME, mio.EXPORT_NAME])
        for name in zi.namelist():
            if name == mio.META_NAME:
                meta = json.loads(zi.read(name))
                meta["format"] = "jaxmd_dp.frozen"
                zo.writestr("frozen.json", json.dumps(meta, indent=2))
            else:
                zo.writestr(name, zi.read(name))
    for a, b in zip(jexp.load_exported(legacy)(coord, box, system.atype), got):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------- neighbor_stat


def brute_force_stats(coord, box, atype, rcut, ntypes, unique=None):
    """Independent numpy count: every pair over every periodic image within reach. Returns the most
    neighbours of each type per atom, the shortest distance, and the most pairs of each type per frame;
    ``unique`` (an (ntypes,) array) gets the most pairs of each type per frame with each pair of same-type
    atoms counted once."""
    nmax = np.zeros(ntypes, int)
    pairs = np.zeros(ntypes, int)
    dmin = np.inf
    for f in range(coord.shape[0]):
        c = coord[f]
        if box is None:
            shifts = np.zeros((1, 3))
        else:
            b = box[f]
            vol = abs(np.linalg.det(b))
            widths = [vol / np.linalg.norm(np.cross(b[(k + 1) % 3], b[(k + 2) % 3])) for k in range(3)]
            n = [int(np.ceil(rcut / w)) + 1 for w in widths]  # one shell more than needed: wrap-insensitive
            grid = np.stack(np.meshgrid(*[np.arange(-k, k + 1) for k in n], indexing="ij"), -1).reshape(-1, 3)
            shifts = grid @ b
        d = c[None, :, None, :] + shifts[None, None, :, :] - c[:, None, None, :]  # (i, j, image, 3)
        r = np.linalg.norm(d, axis=-1)
        self_pair = (np.arange(len(c))[:, None, None] == np.arange(len(c))[None, :, None]) & (r < 1e-9)
        within = (r < rcut) & ~self_pair
        for t in range(ntypes):
            nmax[t] = max(nmax[t], int((within & (atype[None, :, None] == t)).sum(axis=(1, 2)).max()))
            pairs[t] = max(pairs[t], int((within & (atype[None, :, None] == t)).sum()))
            if unique is not None:
                same = int((within & (atype[None, :, None] == t) & (atype[:, None, None] == t)).sum())
                unique[t] = max(unique[t], int((within & (atype[None, :, None] == t)).sum()) - same // 2)
        if within.any():
            dmin = min(dmin, float(r[within].min()))
    return nmax, dmin, pairs


def _frames(system, n):
    return dataclasses.replace(system, coord=system.coord[:n], box=None if system.box is None else system.box[:n])


def test_neighbor_stat_cli_matches_brute_force(tmp_path, capsys):
    from jaxmd_dp.data.system import load_system

    cu = load_system(require(CU), ["Cu"])
    sysdir = tmp_path / "data" / "cu4"
    (sysdir / "set.000").mkdir(parents=True)
    (sysdir / "type.raw").write_text("\n".join(map(str, cu.atype)) + "\n")
    np.save(sysdir / "set.000" / "coord.npy", cu.coord[:4].reshape(4, -1))
    np.save(sysdir / "set.000" / "box.npy", cu.box[:4].reshape(4, 9))
    want_n, want_d, _ = brute_force_stats(cu.coord[:4], cu.box[:4], cu.atype, 6.0, 1)
    assert run_cli(nstat.main, ["-s", str(tmp_path / "data"), "-r", "6", "-t", "Cu", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["max_nbor_size"] == want_n.tolist() and got["type_map"] == ["Cu"] and got["nframes"] == 4
    assert got["min_nbor_dist"] == pytest.approx(want_d, rel=1e-12)
    assert got["sel"] == gns.suggest_sel(want_n)
    assert run_cli(nstat.main, ["-s", str(sysdir), "-r", "6"]) == 0  # text report, type names from indices
    text = capsys.readouterr().out
    assert f"max_nbor_size: {want_n.tolist()}" in text and f"min_nbor_dist: {want_d:f}" in text
    assert f"suggested sel: {gns.suggest_sel(want_n)}" in text
    assert run_cli(nstat.main, ["-s", str(sysdir), "-r", "6", "--one-type"]) == 0
    assert f"max_nbor_size: {want_n.tolist()}" in capsys.readouterr().out


def test_neighbor_stat_two_types_cell_list():
    """Water (O, H), a box big enough for the cell-list method, against brute force."""
    from jaxmd_dp.data.system import load_system

    w = _frames(load_system(require("water/data_3"), ["O", "H"]), 2)
    unique = np.zeros(2, int)
    want_n, want_d, want_pairs = brute_force_stats(w.coord, w.box, w.atype, 6.0, 2, unique)
    st = gns.neighbor_stat([w], 6.0, 2, type_map=["O", "H"], chunk=2)
    assert st.max_nbor_size.tolist() == want_n.tolist() and st.type_map == ["O", "H"]
    assert st.max_pairs_per_system.tolist() == [want_pairs.tolist()]  # the trainer's pair-packing sizes
    assert st.max_unique_pairs_per_system.tolist() == [unique.tolist()]  # and with pair sharing
    assert np.all(unique < want_pairs)
    assert st.min_nbor_dist == pytest.approx(want_d, rel=1e-12)


def test_neighbor_stat_groups_of_atom_counts_on_two_threads():
    """Systems of 32, 16 and 12 atoms (three atom-count groups, scanned on two threads) give each system's
    own brute-force counts and distances."""
    from jaxmd_dp.data.system import load_system

    names = [CU, "cu_asc22/cu.bcc.02x02x02/02.md/sys-0016/deepmd", "cu_asc22/iter.000032/02.fp/data.024"]
    systems = [_frames(load_system(require(n), ["Cu"]), 3) for n in names]
    st = gns.neighbor_stat(systems, 5.0, 1, type_map=["Cu"], chunk=2)
    assert len({s.natoms for s in systems}) == 3
    for k, s in enumerate(systems):
        unique = np.zeros(1, int)
        want_n, want_d, want_pairs = brute_force_stats(s.coord, s.box, s.atype, 5.0, 1, unique)
        assert st.max_nbor_per_system[k].tolist() == want_n.tolist(), k
        assert st.max_pairs_per_system[k].tolist() == want_pairs.tolist(), k
        assert st.max_unique_pairs_per_system[k].tolist() == [want_pairs[0] // 2], k  # one type: half
        assert st.min_dist_per_system[k] == pytest.approx(want_d, rel=1e-12), k


def test_suggested_sel_is_deepmd_kits_auto_rule():
    """``sel: auto:f`` as DeePMD-kit's BaseUpdateSel: n × f truncated, then up to a multiple of 4 (84 → 92, not 96);
    the trainer resolves it with the same rule."""
    from deepmd.utils.update_sel import BaseUpdateSel

    from jaxmd_dp.train import loop

    assert gns.suggest_sel([84]) == [92]
    for factor in (1.1, 1.0, 1.25, 1.5):
        for nmax in ([1, 3, 4, 10, 37, 40, 72], [80, 84], [100, 199]):
            want = [BaseUpdateSel.wrap_up_4(None, n * factor) for n in nmax]
            assert gns.suggest_sel(nmax, factor) == want, (factor, nmax)
            assert list(loop.resolve_sel(f"auto:{factor}", np.asarray(nmax), 6.0, log=lambda *a: None)) == want
    assert gns.suggest_sel([0, 5]) == [4, 8]  # a type never seen keeps a section of 4 slots


def test_neighbor_stat_bad_input(tmp_path, capsys):
    _one_line_error(capsys, ["-s", str(tmp_path / "none"), "-r", "6"], nstat.main, "none")
    _one_line_error(capsys, ["-s", str(tmp_path), "-r", "-1"], nstat.main, "--rcut")


# ---------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_cli_subcommand_help(command, capsys):
    assert cli.main([command, "--help"]) == 0
    assert "usage:" in capsys.readouterr().out


def test_cli_dispatch(capsys, tmp_path):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in cli.COMMANDS)
    assert cli.main([]) == 2
    capsys.readouterr()
    assert cli.main(["nonsense"]) == 2
    assert "unknown command" in capsys.readouterr().err
    assert cli.main(["plot", str(tmp_path / "x.out")]) == 1  # InputError → one line, status 1
    assert capsys.readouterr().err.startswith("error: ")
    assert cli.main(["plot"]) == 2  # argparse usage error


# ---------------------------------------------------------------------------------------------- progress


def test_progress_silent_without_tty(capsys, monkeypatch):
    monkeypatch.delenv("JAXMD_DP_PROGRESS", raising=False)
    buf = io.StringIO()  # not a TTY
    p = Progress(total=100, start=10, stream=buf)
    assert not p.active
    for s in range(11, 31):
        p.update(s, rmse=0.5)
    assert p.step == 30 and p.rate > 0 and 0 < p.eta_s < math.inf
    p.close()
    p.close()
    assert buf.getvalue() == ""
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    with Progress(total=5) as q:  # default stream: pytest's captured stderr is not a TTY either
        q.update(5)
        assert not q.active
    assert capsys.readouterr().err == ""


def test_progress_draws_on_tty(monkeypatch):
    monkeypatch.delenv("JAXMD_DP_PROGRESS", raising=False)

    class TTY(io.StringIO):
        def isatty(self):
            return True

    buf = TTY()
    p = Progress(total=50, start=0, stream=buf)
    assert p.active
    p.update(25, rmse=0.123)
    p.write("a log line")
    p.close()
    text = buf.getvalue()
    assert "step" in text and "50" in text and "a log line" in text
    monkeypatch.setenv("JAXMD_DP_PROGRESS", "0")
    assert not Progress(total=5, stream=TTY()).active
