"""A trained model on disk: one content, written by one writer and read by one reader, in two containers.

The content (the members):

- ``model.json``: format name and version (:data:`FORMAT`, :data:`FORMAT_VERSION`), the jaxmd_dp version
  that wrote it, the model's hyper-parameters (``hyper``: type_map, sel, rcut, nets, precisions),
  provenance (``info``) and ``exported``: the description of a stored ``jax.export`` function, or null;
- ``weights.npz``: the weights under their Flax paths (``params/descriptor/embed_0/layer_0/matrix``, ...)
  and the statistics (``stats/davg``, ``stats/dstd``, ``stats/energy_bias``), bit for bit;
- ``energy_force.jaxexport`` when ``exported`` is set (``freeze --export``, :mod:`jaxmd_dp.export.jax_export`).

The containers: a directory (:func:`save_model`: ``convert_deepmd``, :meth:`Model.save
<jaxmd_dp.model.trained.Model.save>`) or one zip file (:func:`save_frozen`: the ``.jaxdp`` file of
``python -m jaxmd_dp.freeze``). Both are written to a private temporary and renamed into place, then have
the modes ``open``/``mkdir`` give under the umask (:mod:`jaxmd_dp.runtime.file_modes`). :func:`load_model`
reads either, and the zip files of the earlier layout (``frozen.json``, format ``jaxmd_dp.frozen``).
Model files of other programs are picked by suffix (:data:`FILE_FORMATS`). Training outputs and
checkpoints are read by :func:`jaxmd_dp.train.checkpoint.load_trained`.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.deepmd_file import CONVERT_FIRST, load_deepmd, save_deepmd
from jaxmd_dp.model.deepmd_file import FILE_SUFFIXES as DEEPMD_SUFFIXES
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.runtime.file_modes import give_usual_mode
from jaxmd_dp.version import __version__

FORMAT = "jaxmd_dp.model"
FORMAT_VERSION = 1
META_NAME = "model.json"
WEIGHTS_NAME = "weights.npz"
EXPORT_NAME = "energy_force.jaxexport"

#: The formats :func:`read_meta` accepts, with the newest version of each it reads. ``jaxmd_dp.frozen`` is
#: the earlier zip layout: the same content with the metadata in ``frozen.json``.
READ_FORMATS = {FORMAT: FORMAT_VERSION, "jaxmd_dp.frozen": 1}
_META_NAMES = (META_NAME, "frozen.json")  # where a zip file's metadata is, newest layout first


# --------------------------------------------------------------------------------------------- write


def _members(
    hyper: ModelHyper, params, stats: Stats, info: dict | None, exported: tuple[bytes, dict] | None
) -> dict[str, bytes]:
    """The content as file members (name → bytes)."""
    arrays = {"params/" + "/".join(k): np.asarray(v) for k, v in flatten_dict(params).items()}
    arrays.update({f"stats/{k}": np.asarray(v) for k, v in Stats(*stats)._asdict().items()})
    weights = io.BytesIO()
    np.savez(weights, **arrays)
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "jaxmd_dp": __version__,
        "hyper": hyper.to_dict(),
        "info": info or {},
        "exported": None,
    }
    members = {WEIGHTS_NAME: weights.getvalue()}
    if exported is not None:
        blob, desc = exported
        meta["exported"] = {"file": EXPORT_NAME, **desc}
        members[EXPORT_NAME] = bytes(blob)
    members[META_NAME] = json.dumps(meta, indent=2, ensure_ascii=False).encode()
    return members


def _write_dir(path: Path, members: dict[str, bytes]) -> None:
    """A directory holding ``members``, built beside ``path`` and renamed into place (replacing one)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        for name, data in members.items():
            (tmp / name).write_bytes(data)
        give_usual_mode(tmp)  # mkdtemp's directory is private (0700)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old / "x")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_zip(path: Path, members: dict[str, bytes]) -> None:
    """A zip file holding ``members``, written beside ``path`` and renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fp, zipfile.ZipFile(fp, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members.items():
                z.writestr(name, data)
        give_usual_mode(tmp)  # mkstemp's file is private (0600)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _save(container: Callable[[Path, dict], None], path, hyper, params, stats, info, exported) -> Path:
    path = Path(path)
    members = _members(hyper, params, stats, info, exported)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        container(path, members)
    except OSError as e:
        raise InputError(f"{path}: cannot write the model ({e.strerror or e})") from None
    return path


def save_model(
    path: str | os.PathLike,
    hyper: ModelHyper,
    params,
    stats: Stats,
    info: dict | None = None,
    exported: tuple[bytes, dict] | None = None,
) -> Path:
    """Write a model directory (``model.json``, ``weights.npz``), atomically.

    info: provenance (JSON-serialisable); exported: optional (serialised ``jax.export`` bytes, description
    dict) from :func:`jaxmd_dp.export.jax_export.export_energy_force`."""
    return _save(_write_dir, path, hyper, params, stats, info, exported)


def _save_zip(path, hyper, params, stats, info=None, exported=None) -> Path:
    return _save(_write_zip, path, hyper, params, stats, info, exported)


def save_frozen(
    path: str | os.PathLike,
    hyper: ModelHyper,
    params,
    stats: Stats,
    info: dict | None = None,
    exported: tuple[bytes, dict] | None = None,
) -> Path:
    """Write one model file, atomically, in the format of its suffix (:data:`FILE_FORMATS`; any other
    suffix: the jaxmd_dp zip file). Arguments as :func:`save_model`."""
    return file_format(path).save(path, hyper, params, stats, info, exported)


# ---------------------------------------------------------------------------------------------- read


def _member(path: Path, name: str) -> bytes | None:
    """The bytes of member ``name`` of the model directory or zip file ``path``; None when it has none."""
    if path.is_dir():
        return (path / name).read_bytes() if (path / name).is_file() else None
    with zipfile.ZipFile(path) as z:
        return z.read(name) if name in z.namelist() else None


def read_meta(path: str | os.PathLike) -> dict:
    """The metadata (``model.json``) of a model directory or zip file, checked for format and version;
    ``info`` and ``exported`` always present."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such model file or directory")
    what = "model directory" if path.is_dir() else "model file"
    try:
        if not path.is_dir() and not zipfile.is_zipfile(path):
            raise InputError(f"{path}: not a jaxmd_dp model file (not a zip archive)")
        names = (META_NAME,) if path.is_dir() else _META_NAMES
        raw = next((r for r in (_member(path, n) for n in names) if r is not None), None)
        if raw is None:
            raise InputError(f"{path}: not a jaxmd_dp {what} (no {META_NAME} inside)")
        meta = json.loads(raw)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: cannot read the {what} ({type(e).__name__}: {e})") from None
    got = meta.get("format") if isinstance(meta, dict) else None
    if got not in READ_FORMATS:
        raise InputError(f"{path}: not a jaxmd_dp {what} (format {got!r})")
    version = meta.get("version")
    if not isinstance(version, int) or version > READ_FORMATS[got]:
        raise InputError(
            f"{path}: model format version {version!r} is newer than this jaxmd_dp ({__version__}) "
            f"reads (up to {READ_FORMATS[got]}); upgrade jaxmd_dp"
        )
    meta.setdefault("info", {})
    meta.setdefault("exported", None)
    return meta


def _load(path: Path):
    """(hyper, params, stats) of a jaxmd_dp model directory or zip file."""
    meta = read_meta(path)
    try:
        hyper = ModelHyper.from_dict(meta["hyper"])
        raw = _member(path, WEIGHTS_NAME)
        if raw is None:
            raise KeyError(WEIGHTS_NAME)
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        params = unflatten_dict({tuple(k.split("/")[1:]): v for k, v in arrays.items() if k.startswith("params/")})
        stats = Stats(*(arrays[f"stats/{k}"] for k in Stats._fields))
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: corrupt model ({type(e).__name__}: {e})") from None
    return hyper, params, stats


def load_model(path: str | os.PathLike):
    """Read a model directory or model file: returns (hyper, params, stats), numpy arrays, bit for bit as
    written. Raises InputError for anything else (training outputs and checkpoints:
    :func:`jaxmd_dp.train.checkpoint.load_trained`)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such model file or directory")
    if path.is_dir():
        if not is_model_dir(path):
            raise InputError(f"{path}: not a model directory (no {META_NAME}) nor a model file")
        return _load(path)
    return file_format(path).load(path)


def read_exported(path: str | os.PathLike) -> tuple[dict, bytes]:
    """(description, serialised ``jax.export`` function) stored in a model file by ``freeze --export``."""
    path = Path(path)
    desc = read_meta(path)["exported"]
    if not desc:
        raise InputError(f"{path}: holds no exported function (freeze it with --export --natoms N)")
    try:
        blob = _member(path, desc["file"])
        if blob is None:
            raise KeyError(desc["file"])
    except (OSError, KeyError, TypeError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: cannot read the exported function ({type(e).__name__}: {e})") from None
    return desc, blob


def is_model_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a model directory (holds ``model.json``)."""
    return (Path(path) / META_NAME).is_file()


# ------------------------------------------------------------------------------------ file formats


class FileFormat(NamedTuple):
    """How a model file of one kind is written and read.

    save(path, hyper, params, stats, info, exported) -> Path; load(path) -> (hyper, params, stats)."""

    save: Callable[..., Path]
    load: Callable[[Path], tuple]


#: Model files by suffix (lower case): what :func:`save_frozen` (``freeze -o``) writes and :func:`load_model`
#: reads. A suffix not listed is a jaxmd_dp zip file. Another program's model files (DeePMD-kit's ``.dp``,
#: ``.yaml``) are a row each here.
def _save_deepmd(path, hyper, params, stats, info=None, exported=None) -> Path:
    if exported is not None:
        raise InputError(f"{path}: --export writes jaxmd_dp's model file (.jaxdp), not DeePMD-kit's .dp/.yaml")
    return save_deepmd(path, hyper, params, stats)


FILE_FORMATS: dict[str, FileFormat] = {
    ".jaxdp": FileFormat(_save_zip, _load),
    # DeePMD-kit's model file; its .pb/.pth are refused with the dp convert-backend command that makes a .dp
    **{suffix: FileFormat(_save_deepmd, load_deepmd) for suffix in DEEPMD_SUFFIXES + tuple(CONVERT_FIRST)},
}


def file_format(path: str | os.PathLike) -> FileFormat:
    """The :class:`FileFormat` of a model file, by its suffix (default: the jaxmd_dp zip file)."""
    return FILE_FORMATS.get(Path(path).suffix.lower(), FILE_FORMATS[".jaxdp"])
