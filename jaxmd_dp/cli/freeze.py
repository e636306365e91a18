"""Freeze a model into one self-contained, versioned file (DeePMD-kit's dp freeze).

    python -m jaxmd_dp.freeze -m MODEL -o model.jaxdp [--export --natoms N [--nopbc] [--platforms cpu,cuda]]

MODEL: a training output directory, a checkpoint directory, a model directory (``convert_deepmd``) or a
model file. The output's format follows its suffix (:data:`jaxmd_dp.model.io.FILE_FORMATS`); any suffix
but those listed there gives jaxmd_dp's zip file, which needs no training config to load:

- ``model.json``: format name and version, the jaxmd_dp version that wrote it, the model's
  hyper-parameters (type_map, sel, rcut, nets, precisions) and provenance (source, step, time);
- ``weights.npz``: the weights under their Flax paths (``params/...``) and the statistics
  (``stats/davg``, ``stats/dstd``, ``stats/energy_bias``), bit for bit as trained;
- with ``--export``: ``energy_force.jaxexport``, a ``jax.export`` serialisation of the model's prediction
  (:func:`jaxmd_dp.model.evaluate.predict_frames`) for ``N`` atoms (any number of frames, any atom types),
  weights baked in; it runs without jaxmd_dp's model code (see :func:`jaxmd_dp.export.jax_export.load_exported`).

Read it with :func:`jaxmd_dp.api.load_model` (a :class:`~jaxmd_dp.model.trained.Model`),
:func:`jaxmd_dp.model.io.load_model` (→ hyper, params, stats), ``python -m jaxmd_dp.test -m model.jaxdp``,
``--init-frz-model model.jaxdp``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from jaxmd_dp.errors import InputError
from jaxmd_dp.export.jax_export import export_energy_force
from jaxmd_dp.model.io import is_model_dir, load_model, read_meta, save_frozen
from jaxmd_dp.train.checkpoint import checkpoint_steps, find_checkpoint_dir, load_trained


def _read_source(model: str | os.PathLike):
    """(hyper, params, stats, info) from a model file, a model directory, or a training run/checkpoint."""
    path = Path(model)
    if not path.exists():
        raise InputError(f"{path}: no such model, checkpoint or training output directory")
    info: dict = {"source": str(path.absolute())}
    if path.is_file():
        hyper, params, stats = load_model(path)
        info["refrozen_from"] = read_meta(path)["info"]
        return hyper, params, stats, info
    hyper, params, stats = load_trained(path)
    if not is_model_dir(path):  # a training output: record which checkpoint step was frozen
        try:
            info["step"] = max(checkpoint_steps(find_checkpoint_dir(path)))
        except (InputError, OSError, ValueError):  # provenance only: never fail a freeze over it
            pass
    return hyper, params, stats, info


def freeze(
    model: str | os.PathLike,
    output: str | os.PathLike,
    export_natoms: int | None = None,
    pbc: bool = True,
    min_box_width: float | None = None,
    platforms: tuple[str, ...] | None = None,
) -> Path:
    """Freeze ``model`` (see :func:`_read_source`) into ``output``; with ``export_natoms``, also store the
    ``jax.export`` energy/force function for that many atoms. Returns the written path."""
    hyper, params, stats, info = _read_source(model)
    info["frozen_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    exported = None
    if export_natoms is not None:
        exported = export_energy_force(hyper, params, stats, export_natoms, pbc, min_box_width, platforms)
    return save_frozen(output, hyper, params, stats, info, exported)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxmd_dp.freeze", description=__doc__.splitlines()[0])
    p.add_argument(
        "-m",
        "--model",
        "-c",
        "--checkpoint",
        dest="model",
        required=True,
        help="training output directory, checkpoint directory or model directory",
    )
    p.add_argument(
        "-o",
        "--output",
        default="frozen_model.jaxdp",
        help="file to write (default frozen_model.jaxdp; .dp or .yaml: DeePMD-kit's model file, which "
        "dp convert-backend turns into .pb or .pth)",
    )
    p.add_argument(
        "--export", action="store_true", help="also store a jax.export energy/force/virial function (needs --natoms)"
    )
    p.add_argument("--natoms", type=int, default=None, help="number of atoms the exported function takes")
    p.add_argument("--nopbc", action="store_true", help="export for molecules without periodic boundaries")
    p.add_argument(
        "--min-box-width",
        type=float,
        default=None,
        help="thinnest box (face to face, Å) the exported function must handle (default: rcut)",
    )
    p.add_argument(
        "--platforms",
        default=None,
        help="comma-separated jax.export platforms, e.g. cpu,cuda (default: this machine's)",
    )
    args = p.parse_args(argv)
    if args.export and args.natoms is None:
        raise InputError("--export: give the number of atoms with --natoms N")
    if args.natoms is not None and not args.export:
        raise InputError("--natoms: only used with --export")
    platforms = tuple(x.strip() for x in args.platforms.split(",") if x.strip()) if args.platforms else None
    out = freeze(
        args.model, args.output, args.natoms if args.export else None, not args.nopbc, args.min_box_width, platforms
    )
    print(f"wrote {out}")
    return 0
