"""A trained model on disk, in two layouts of the same content: a directory with ``model.json``
(hyper-parameters, format version) and ``weights.npz`` (weights under their Flax paths, plus the
statistics ``stats/davg``, ``stats/dstd``, ``stats/energy_bias``), or one frozen zip file holding the
same two members (``frozen.json``, ``weights.npz``; ``python -m jaxmd_dp.freeze``).
Training outputs and checkpoints are read by :func:`jaxmd_dp.train.checkpoint.load_trained`."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from jaxmd_dp.version import __version__
from jaxmd_dp.errors import InputError
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.runtime.file_modes import give_usual_mode

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
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    return path


def load_model(path: str | os.PathLike):
    """Read a model directory (``model.json`` + ``weights.npz``) or a frozen model file.

    Returns (hyper, params, stats); raises InputError for anything else (training outputs and
    checkpoints: :func:`jaxmd_dp.train.checkpoint.load_trained`).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such model file or directory")
    if path.is_file():  # a frozen model file (python -m jaxmd_dp.freeze)
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
    raise InputError(f"{path}: not a model directory (no model.json) nor a frozen model file")


def is_model_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a model directory (holds ``model.json``)."""
    return (Path(path) / "model.json").is_file()


# ------------------------------------------------------------------------------------ frozen model file
FROZEN_FORMAT = "jaxmd_dp.frozen"
FROZEN_FORMAT_VERSION = 1
META_NAME = "frozen.json"
WEIGHTS_NAME = "weights.npz"
EXPORT_NAME = "energy_force.jaxexport"


# --------------------------------------------------------------------------------------------- write


def _arrays(params, stats: Stats) -> dict[str, np.ndarray]:
    arrays = {"params/" + "/".join(k): np.asarray(v) for k, v in flatten_dict(params).items()}
    arrays.update({f"stats/{k}": np.asarray(v) for k, v in Stats(*stats)._asdict().items()})
    return arrays


def save_frozen(path: str | os.PathLike, hyper: ModelHyper, params, stats: Stats, info: dict | None = None,
                exported: tuple[bytes, dict] | None = None) -> Path:
    """Write a frozen model file atomically (a temporary file renamed into place).

    exported: optional (serialised ``jax.export`` bytes, description dict) from :func:`export_energy_force`."""
    path = Path(path)
    buf = io.BytesIO()
    np.savez(buf, **_arrays(params, stats))
    meta = {"format": FROZEN_FORMAT, "version": FROZEN_FORMAT_VERSION, "jaxmd_dp": __version__,
            "hyper": hyper.to_dict(), "info": info or {}, "exported": None}
    if exported is not None:
        meta["exported"] = {"file": EXPORT_NAME, **exported[1]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise InputError(f"{path}: cannot write the frozen model ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as fp, zipfile.ZipFile(fp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(META_NAME, json.dumps(meta, indent=2, ensure_ascii=False).encode())
            z.writestr(WEIGHTS_NAME, buf.getvalue())
            if exported is not None:
                z.writestr(EXPORT_NAME, bytes(exported[0]))
        give_usual_mode(tmp)  # mkstemp's file is private (0600)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{path}: cannot write the frozen model ({e.strerror or e})") from None
    return path


# ---------------------------------------------------------------------------------------------- read


def is_frozen(path: str | os.PathLike) -> bool:
    """True for a file that is a zip archive holding ``frozen.json`` (cheap; does not validate)."""
    path = Path(path)
    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return META_NAME in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read_meta(path: str | os.PathLike) -> dict:
    """The ``frozen.json`` of a frozen model, checked for format and version."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such model file")
    if not path.is_file():
        raise InputError(f"{path}: a directory, not a frozen model file")
    try:
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read(META_NAME))
    except zipfile.BadZipFile:
        raise InputError(f"{path}: not a jaxmd_dp frozen model (not a zip archive)") from None
    except KeyError:
        raise InputError(f"{path}: not a jaxmd_dp frozen model (no {META_NAME} inside)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the frozen model ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FROZEN_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise InputError(f"{path}: not a jaxmd_dp frozen model (format {got!r})")
    version = meta.get("version")
    if not isinstance(version, int) or version > FROZEN_FORMAT_VERSION:
        raise InputError(f"{path}: frozen-model format version {version!r} is newer than this jaxmd_dp "
                         f"({__version__}) reads (up to {FROZEN_FORMAT_VERSION}); upgrade jaxmd_dp")
    return meta


def load_frozen(path: str | os.PathLike):
    """Read a frozen model file: returns (hyper, params, stats), numpy arrays, bit for bit as frozen."""
    path = Path(path)
    meta = read_meta(path)
    try:
        hyper = ModelHyper.from_dict(meta["hyper"])
        with zipfile.ZipFile(path) as z:
            raw = z.read(WEIGHTS_NAME)
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        params = unflatten_dict({tuple(k.split("/")[1:]): v for k, v in arrays.items() if k.startswith("params/")})
        stats = Stats(*(arrays[f"stats/{k}"] for k in Stats._fields))
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: corrupt frozen model ({type(e).__name__}: {e})") from None
    return hyper, params, stats
