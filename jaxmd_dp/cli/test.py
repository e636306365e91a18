"""Test a model on labelled data, as DeePMD-kit's ``dp test``.

    python -m jaxmd_dp.test -m MODEL -s SYSTEM [-n NFRAMES] [-d DETAIL]

MODEL: a model file (``freeze``), a model directory (``convert_deepmd``) or a training output/checkpoint
directory.
SYSTEM: a DeePMD-kit npy system, or a directory searched for systems. Prints energy RMSE/MAE (total and
per atom), force RMSE/MAE and virial RMSE/MAE where labels exist; ``-d DETAIL`` writes DeePMD-kit's
detail files DETAIL.e.out, .e_peratom.out, .f.out, .v.out, .v_peratom.out (data columns, then predictions).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from jaxmd_dp.api import Model, as_model
from jaxmd_dp.data.sampler import find_systems
from jaxmd_dp.data.system import System, load_system
from jaxmd_dp.model.evaluate import errors, predict_system

_V_COLS = "vxx vxy vxz vyx vyy vyz vzx vzy vzz"
_V_HEADER = " ".join(f"data_{c}" for c in _V_COLS.split()) + " " + " ".join(f"pred_{c}" for c in _V_COLS.split())


def write_detail(detail: str, system: System, pred: dict, append: bool) -> None:
    """DeePMD-kit's detail files for one system (appended after the first system)."""
    base = Path(detail)
    n, na = len(pred["energy"]), system.natoms
    label = lambda x, shape: np.zeros(shape) if x is None else x[:n]  # noqa: E731
    e = np.stack([label(system.energy, (n,)), pred["energy"]], axis=1)
    files = [
        (".e.out", e, "data_e pred_e"),
        (".e_peratom.out", e / na, "data_e pred_e"),
        (
            ".f.out",
            np.concatenate([label(system.force, (n, na, 3)).reshape(-1, 3), pred["force"].reshape(-1, 3)], 1),
            "data_fx data_fy data_fz pred_fx pred_fy pred_fz",
        ),
    ]
    if system.pbc:
        v = np.concatenate([label(system.virial, (n, 9)), pred["virial"]], 1)
        files += [(".v.out", v, _V_HEADER), (".v_peratom.out", v / na, _V_HEADER)]
    base.parent.mkdir(parents=True, exist_ok=True)
    for suffix, data, header in files:
        with open(base.with_suffix(suffix), "ab" if append else "wb") as fp:
            np.savetxt(fp, data, header=f"{system.path}: {header}")


_LINES = [
    ("e", "Energy MAE         ", "mae_e", "eV"),
    ("e", "Energy RMSE        ", "rmse_e", "eV"),
    ("e", "Energy MAE/Natoms  ", "mae_ea", "eV"),
    ("e", "Energy RMSE/Natoms ", "rmse_ea", "eV"),
    ("f", "Force  MAE         ", "mae_f", "eV/A"),
    ("f", "Force  RMSE        ", "rmse_f", "eV/A"),
    ("v", "Virial MAE         ", "mae_v", "eV"),
    ("v", "Virial RMSE        ", "rmse_v", "eV"),
    ("v", "Virial MAE/Natoms  ", "mae_va", "eV"),
    ("v", "Virial RMSE/Natoms ", "rmse_va", "eV"),
]


def format_errors(err: dict) -> list[str]:
    return [f"{name}: {err[key][0]:e} {unit}" for _, name, key, unit in _LINES if key in err]


def weighted_average(errs: list[dict]) -> dict:
    """DeePMD-kit's average over systems: MAE weighted by count, RMSE as sqrt of the weighted mean square."""
    out = {}
    for key in {k for e in errs for k in e}:
        vals = [e[key] for e in errs if key in e]
        n = sum(c for _, c in vals)
        if key.startswith("rmse"):
            out[key] = (float(np.sqrt(sum(v * v * c for v, c in vals) / n)), n)
        else:
            out[key] = (float(sum(v * c for v, c in vals) / n), n)
    return out


def test_model(model: str | Model, systems: list[str], nframes: int = 0, detail: str | None = None, log=print) -> dict:
    """Run ``dp test`` on each system; returns the weighted-average errors (see :func:`errors`).

    model: a path (:func:`jaxmd_dp.api.load_model`) or a :class:`~jaxmd_dp.api.Model`."""
    model = as_model(model)
    all_err = []
    for k, path in enumerate(systems):
        system = load_system(path, model.type_map)
        pred = predict_system(model.evaluator, system, nframes)
        err = errors(system, pred)
        all_err.append(err)
        log("# ---------------output of dp test--------------- ")
        log(f"# testing system : {path}")
        log(f"# number of test data : {len(pred['energy'])} ")
        for line in format_errors(err):
            log(line)
        log("# ----------------------------------------------- ")
        if detail:
            write_detail(detail, system, pred, append=k > 0)
    avg = weighted_average(all_err)
    if len(systems) > 1:
        log("# ----------weighted average of errors----------- ")
        log(f"# number of systems : {len(systems)}")
        for line in format_errors(avg):
            log(line)
        log("# ----------------------------------------------- ")
    return avg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxmd_dp.test", description="Test a model on labelled data (dp test).")
    p.add_argument("-m", "--model", required=True, help="model file or directory, or training output/checkpoint")
    p.add_argument("-s", "--system", required=True, help="system directory (searched recursively for systems)")
    p.add_argument("-n", "--numb-test", type=int, default=0, help="frames tested per system (0: all)")
    p.add_argument("-d", "--detail-file", default=None, help="prefix of DeePMD-kit's detail files")
    args = p.parse_args(argv)
    test_model(args.model, find_systems(args.system), args.numb_test, args.detail_file)
    return 0
