"""A trained model on disk: a directory with ``model.json`` (hyper-parameters, format version) and
``weights.npz`` (weights under their Flax paths, plus the statistics ``stats/davg``, ``stats/dstd``,
``stats/energy_bias``). Written by ``convert_deepmd`` and by training; read by ``test`` and the API.
A training run directory or checkpoint is accepted too (see :func:`load_model`)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from jaxmd_dp import __version__
from jaxmd_dp.errors import InputError
from jaxmd_dp.file_modes import give_usual_mode
from jaxmd_dp.model.energy import ModelHyper, Stats

FORMAT = "jaxmd_dp.model"
FORMAT_VERSION = 1


def save_model(path: str | os.PathLike, hyper: ModelHyper, params, stats: Stats, info: dict | None = None) -> Path:
    """Write a model directory atomically (a temporary directory renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    arrays = {"params/" + "/".join(k): np.asarray(v) for k, v in flatten_dict(params).items()}
    arrays.update({f"stats/{k}": np.asarray(v) for k, v in stats._asdict().items()})
    np.savez(tmp / "weights.npz", **arrays)
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "jaxmd_dp": __version__, "hyper": hyper.to_dict()}
    meta["info"] = info or {}
    (tmp / "model.json").write_text(json.dumps(meta, indent=2))
    give_usual_mode(tmp)  # mkdtemp's directory is private (0700)
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
        os.replace(path, old / "x")
        os.replace(tmp, path)
        import shutil

        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    return path


def load_model(path: str | os.PathLike):
    """Read a model: a model directory (``model.json`` + ``weights.npz``), or a training output
    directory / checkpoint (delegated to :mod:`jaxmd_dp.train.checkpoint`).

    Returns (hyper, params, stats).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such model file or directory")
    if path.is_file():  # a frozen model file (python -m jaxmd_dp.freeze)
        from jaxmd_dp.freeze import load_frozen

        return load_frozen(path)
    meta_file = path / "model.json"
    if path.is_dir() and meta_file.exists():
        try:
            meta = json.loads(meta_file.read_text())
            if meta.get("format") != FORMAT:
                raise InputError(f"{meta_file}: not a jaxmd_dp model (format {meta.get('format')!r})")
            if meta.get("version", 0) > FORMAT_VERSION:
                raise InputError(f"{meta_file}: model format {meta['version']} is newer than this jaxmd_dp reads")
            hyper = ModelHyper.from_dict(meta["hyper"])
            with np.load(path / "weights.npz") as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: cannot read model ({e})") from None
        params = unflatten_dict({tuple(k.split("/")[1:]): v for k, v in arrays.items() if k.startswith("params/")})
        stats = Stats(*(arrays[f"stats/{k}"] for k in Stats._fields))
        return hyper, params, stats
    from jaxmd_dp.train.checkpoint import load_model_from_checkpoint  # training outputs

    return load_model_from_checkpoint(path)
