"""Change a trained model's energy bias, as DeePMD-kit's ``dp change-bias``.

    python -m jaxmd_dp.change_bias MODEL [-s SYSTEM | -f DATAFILE | -b BIAS ...] [-n N] [-m change|set] [-o OUT]

MODEL: a model file or directory, DeePMD-kit's ``.dp``/``.yaml``, or a training output/checkpoint directory.
With data (``-s``: a directory searched for systems, default "."; ``-f``: a file listing one system per line),
``-n`` frames per system (0: all; drawn at random, seed 0) are predicted and the bias is changed by least
squares on their energies: ``-m change`` (default) adds the fit of label − prediction, ``-m set`` replaces
it with the fit of the labels (:mod:`jaxmd_dp.model.bias`). ``-b`` sets the bias, one value per type of the
model's type_map (eV). The model is written to OUT (default: MODEL with ``_updated`` before its suffix; a
directory gives a model directory), in the format of OUT's suffix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from jaxmd_dp.data.sampler import find_systems, make_batch
from jaxmd_dp.data.system import load_system
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry.stats import sample_stat_indices
from jaxmd_dp.model.bias import MODES, change_energy_bias
from jaxmd_dp.model.energy import Stats
from jaxmd_dp.model.trained import Model
from jaxmd_dp.train.checkpoint import load_trained

SEED = 0  # the frames -n draws


def default_output(model: str | Path) -> Path:
    """DeePMD-kit's default: ``model.dp`` → ``model_updated.dp``; a directory ``run`` → ``run_updated``."""
    p = Path(model)
    if p.is_dir():
        p = p.resolve()
        return p.with_name(p.name + "_updated")
    return p.with_name(f"{p.stem}_updated{p.suffix}")


def read_datafile(path: str | Path) -> list[str]:
    """The systems listed in a data file, one per line (blank lines skipped)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read the data file ({e.strerror or e})") from None
    systems = [line.strip() for line in lines if line.strip()]
    if not systems:
        raise InputError(f"{path}: lists no system")
    return systems


def sampled_frames(paths: list[str], type_map, numb_batch: int) -> list[dict]:
    """``numb_batch`` frames of each system (0: all), drawn without replacement (DeePMD-kit's batches of one
    frame from a shuffled loader), as one batch per system."""
    systems = [load_system(p, list(type_map)) for p in paths]
    nbatch = numb_batch if numb_batch > 0 else max(s.nframes for s in systems)
    idx = sample_stat_indices([s.nframes for s in systems], [1] * len(systems), nbatch, SEED)
    return [make_batch(s, i, k) for k, (s, i) in enumerate(zip(systems, idx))]


def change_bias(
    model: str | Path,
    system: str | Path = ".",
    datafile: str | Path | None = None,
    bias: list[float] | None = None,
    numb_batch: int = 0,
    mode: str = "change",
    output: str | Path | None = None,
    log=print,
) -> Path:
    """Write ``model`` with its energy bias changed on the systems under ``system`` or listed in ``datafile``
    (``mode``: :data:`~jaxmd_dp.model.bias.MODES`, ``numb_batch`` frames per system, 0: all), or set to ``bias``
    (one value per type, eV). Returns the path written."""
    hyper, params, stats = load_trained(model)
    stats = Stats(*(np.asarray(s) for s in stats))
    names = list(hyper.type_map)
    if bias is not None:
        if len(bias) != hyper.ntypes:
            raise InputError(f"-b: {len(bias)} values for the {hyper.ntypes} types of the model's type_map {names}")
        new = np.asarray(bias, np.float64)
    else:
        if numb_batch < 0:
            raise InputError(f"-n: must be >= 0, got {numb_batch}")
        systems = read_datafile(datafile) if datafile is not None else find_systems(system)
        frames = sampled_frames(systems, names, numb_batch)
        try:
            change = change_energy_bias(hyper, params, stats, frames, mode)
        except ValueError as e:
            raise InputError(f"{', '.join(systems)}: {e}") from None
        new = change.new
        log(f"RMSE of the energy per atom after the regression: {change.rmse_per_atom:.6g} eV")
    log(f"Change energy bias of {names} from {np.asarray(stats.energy_bias).tolist()} to {new.tolist()} (eV)")
    out = default_output(model) if output is None else Path(output)
    path = Model(hyper, params, Stats(stats.davg, stats.dstd, new)).save(out, {"changed_bias_from": str(model)})
    log(f"Saved model to {path}")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m jaxmd_dp.change_bias", description="Change a model's energy bias on data (dp change-bias)."
    )
    p.add_argument("model", metavar="MODEL", help="model file or directory, DeePMD-kit .dp/.yaml, or training output")
    source = p.add_mutually_exclusive_group()
    source.add_argument("-s", "--system", default=".", help="directory searched for systems (default: .)")
    source.add_argument("-f", "--datafile", default=None, help="a file listing one system directory per line")
    source.add_argument(
        "-b", "--bias-value", type=float, nargs="+", default=None, help="the bias of each type of the type_map, eV"
    )
    p.add_argument("-n", "--numb-batch", type=int, default=0, help="frames per system (0: all)")
    p.add_argument("-m", "--mode", default="change", choices=MODES, help="change (default): add the fit of "
                   "label − prediction; set: the fit of the labels")  # fmt: skip
    p.add_argument("-o", "--output", default=None, help="the model written (default: MODEL with _updated)")
    args = p.parse_args(argv)
    change_bias(args.model, args.system, args.datafile, args.bias_value, args.numb_batch, args.mode, args.output)
    return 0
