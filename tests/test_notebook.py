"""The notebook API (jaxmd_dp.api) and examples/quickstart.ipynb, executed end to end with nbclient."""

import os
from pathlib import Path

import pytest
from fixture_models import load_fixture, max_rel
from shared_paths import require, shared_dir

from jaxmd_dp.errors import InputError

REPO = Path(__file__).absolute().parents[1]
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def test_top_level_exports():
    import jaxmd_dp
    from jaxmd_dp import Trainer, load_config
    from jaxmd_dp.config import load_config as config_load
    from jaxmd_dp.train.loop import Trainer as LoopTrainer

    assert Trainer is LoopTrainer and load_config is config_load
    assert hasattr(Trainer, "model") and jaxmd_dp.Trainer is Trainer


def test_model_energy_and_forces_match_deepmd_kit(tmp_path):
    from jaxmd_dp.api import Model
    from jaxmd_dp.model.io import save_model

    hyper, params, stats, p = load_fixture("cu_virial")  # 32 Cu atoms, triclinic
    model = Model.load(save_model(tmp_path / "m", hyper, params, stats))
    n = len(p["atype"])
    e, f = model.energy_and_forces(p["coord"][0], p["box"][0], ["Cu"] * n)  # one frame, types as symbols
    assert isinstance(e, float) and f.shape == (n, 3)
    assert e == pytest.approx(p["energy"][0], rel=1e-12)
    assert max_rel(f, p["force"][0]) <= 1e-10
    E, F = model.energy_and_forces(p["coord"], p["box"], p["atype"])  # all frames, type indices
    assert E.shape == (4,) and F.shape == (4, n, 3)
    assert max_rel(E, p["energy"]) <= 1e-12 and max_rel(F, p["force"]) <= 1e-10
    pred = model.predict(p["coord"][1], p["box"][1].ravel(), p["atype"])
    assert max_rel(pred.virial, p["virial"][1]) <= 1e-10 and pred.atom_energy.shape == (n,)
    same = Model(hyper, params, stats)  # a second Model of the same hyper-parameters reuses the compiled code
    assert same.energy_and_forces(p["coord"][0], p["box"][0], p["atype"])[0] == pytest.approx(e, rel=1e-14)
    with pytest.raises(InputError, match="type_map"):
        model.energy_and_forces(p["coord"][0], p["box"][0], ["O"] * n)
    assert "Cu" in repr(model) and model.type_map == ["Cu"]


def test_live_plot_is_a_callback_fed_numbers(capsys):
    """LivePlot is a training callback: each window's numbers become a point (nothing is parsed or printed);
    as the trainer's log it echoes the other lines but not the per-window ones the plot shows."""
    from jaxmd_dp.api import LivePlot
    from jaxmd_dp.train.callbacks import Callback, Window

    plot = LivePlot()
    assert isinstance(plot, Callback)
    plot.on_window(
        None,
        Window(
            5,
            {"rmse": 26.8, "rmse_e": 0.533, "rmse_f": 0.847},
            {"rmse": 26.0, "rmse_e": 0.114, "rmse_f": 0.823},
            1e-3,
            1.23,
            4.0,
        ),
    )
    plot.on_window(None, Window(10, {"rmse": 20.0, "rmse_e": 0.3, "rmse_f": 0.7}, None, 9e-4, 1.0, 0.0))
    plot(15, {"rmse": 19.0, "rmse_e": 0.2, "rmse_f": 0.6}, None, 8e-4)  # a point by hand
    assert plot.steps == [5, 10, 15]
    assert plot.train["rmse_e"] == [0.533, 0.3, 0.2] and plot.valid["rmse_f"][0] == 0.823
    assert plot.lr == [1e-3, 9e-4, 8e-4]
    assert capsys.readouterr().out == ""
    plot("data statistics in 0.1 s")
    plot("batch       5: trn: rmse = 2.68e+01, rmse_e = 5.33e-01, rmse_f = 8.47e-01")
    assert capsys.readouterr().out == "data statistics in 0.1 s\n" and plot.steps == [5, 10, 15]
    assert plot.png()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quickstart_notebook_executes(tmp_path):
    """examples/quickstart.ipynb runs top to bottom without an error and shows the learning curve."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    water = require("water")  # skip (or fail under JAXMD_DP_REQUIRE_SHARED=1) without ../shared/data
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_before = os.environ.get("JAXMD_DP_DATA_MIRROR")
    os.environ["JAXMD_DP_DATA_MIRROR"] = str(shared_dir())  # the kernel inherits it
    try:
        client = nbclient.NotebookClient(
            nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
        )
        client.execute()  # raises CellExecutionError on the first failing cell
    finally:
        if env_before is None:
            os.environ.pop("JAXMD_DP_DATA_MIRROR", None)
        else:
            os.environ["JAXMD_DP_DATA_MIRROR"] = env_before
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert str(water) in text, "the notebook used the shared water data"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "learning curve and force parity plots"
    nbformat.write(nb, tmp_path / "quickstart.executed.ipynb")
