"""Freeze a model into one self-contained, versioned file (DeePMD-kit's dp freeze).

    python -m jaxmd_dp.freeze -m MODEL -o model.jaxdp [--export --natoms N [--nopbc] [--platforms cpu,cuda]]

MODEL: a training output directory, a checkpoint directory, or a model directory (``convert_deepmd``).
The file is a zip archive that needs no training config to load:

- ``frozen.json``: format name and version, the jaxmd_dp version that wrote it, the model's
  hyper-parameters (type_map, sel, rcut, nets, precisions) and provenance (source, step, time);
- ``weights.npz``: the weights under their Flax paths (``params/...``) and the statistics
  (``stats/davg``, ``stats/dstd``, ``stats/energy_bias``), bit for bit as trained;
- with ``--export``: ``energy_force.jaxexport``, a ``jax.export`` serialisation of the energy/force/virial
  function for ``N`` atoms (any number of frames, any atom types), weights baked in; it runs without
  jaxmd_dp's model code (see :func:`load_exported`).

Read it with :func:`load_frozen` (→ hyper, params, stats), or with ``jaxmd_dp.model_io.load_model``,
``python -m jaxmd_dp.test -m model.jaxdp``, ``--init-model model.jaxdp``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from jaxmd_dp import __version__
from jaxmd_dp.cli_util import run_cli
from jaxmd_dp.errors import InputError
from jaxmd_dp.file_modes import give_usual_mode
from jaxmd_dp.model.energy import ModelHyper, Stats

FORMAT = "jaxmd_dp.frozen"
FORMAT_VERSION = 1
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
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "jaxmd_dp": __version__, "hyper": hyper.to_dict(),
            "info": info or {}, "exported": None}
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
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise InputError(f"{path}: not a jaxmd_dp frozen model (format {got!r})")
    version = meta.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InputError(f"{path}: frozen-model format version {version!r} is newer than this jaxmd_dp "
                         f"({__version__}) reads (up to {FORMAT_VERSION}); upgrade jaxmd_dp")
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


# ---------------------------------------------------------------------------------------------- export


class ExportedPrediction(NamedTuple):
    """energy (nf,) eV; force (nf, natoms, 3) eV/Å; virial (nf, 9) eV; atom_energy (nf, natoms) eV;
    nneigh_max (ntypes,) most neighbours of each type any atom had (more than ``sel`` were dropped)."""

    energy: np.ndarray
    force: np.ndarray
    virial: np.ndarray
    atom_energy: np.ndarray
    nneigh_max: np.ndarray


def export_energy_force(hyper: ModelHyper, params, stats: Stats, natoms: int, pbc: bool = True,
                        min_box_width: float | None = None, platforms: tuple[str, ...] | None = None):
    """Serialise the energy/force/virial function for ``natoms`` atoms with ``jax.export``.

    The function is ``f(coord (nf, natoms, 3), box (nf, 3, 3), atype (natoms,) int32)`` (without ``box`` when
    ``pbc`` is False) → (energy, force, virial, atom_energy, nneigh_max); nf is symbolic (any number of
    frames). Neighbours are found by brute force over the periodic images within reach of boxes whose
    face-to-face widths are at least ``min_box_width`` Å (default rcut: one image shell).

    Returns (serialised bytes, description dict for ``frozen.json``)."""
    import jax
    import jax.numpy as jnp

    from jaxmd_dp.geometry import neighbor
    from jaxmd_dp.model.energy import predict

    if natoms < 1:
        raise InputError(f"--natoms {natoms}: must be a positive number of atoms")
    min_w = float(hyper.rcut if min_box_width is None else min_box_width)
    if pbc and min_w <= 0:
        raise InputError(f"--min-box-width {min_box_width}: must be positive")
    reach = (int(math.ceil(hyper.rcut / min_w)),) * 3 if pbc else (0, 0, 0)
    spec = neighbor.NeighborSpec(float(hyper.rcut), tuple(hyper.sel), bool(pbc), "brute", reach, (1, 1, 1), natoms)
    params = jax.tree_util.tree_map(jnp.asarray, params)
    stats = Stats(*(jnp.asarray(s) for s in stats))

    def run(coord, box, atype):
        nl = neighbor.build(spec, coord, box, atype, kernels="jnp")
        p = predict(hyper, params, stats, coord, box, atype, nl, None, kernels="jnp")
        return p.energy, p.force, p.virial, p.atom_energy, jnp.max(nl.nneigh, axis=(0, 1))

    (nf,) = jax.export.symbolic_shape("nf")
    coord = jax.ShapeDtypeStruct((nf, natoms, 3), jnp.float64)
    atype = jax.ShapeDtypeStruct((natoms,), jnp.int32)
    if pbc:
        fn, args = jax.jit(run), (coord, jax.ShapeDtypeStruct((nf, 3, 3), jnp.float64), atype)
    else:
        fn, args = jax.jit(lambda c, t: run(c, None, t)), (coord, atype)
    kw = {} if platforms is None else {"platforms": tuple(platforms)}
    try:
        import flatbuffers  # noqa: F401  (jax.export's serialisation needs it)
    except ImportError:
        raise InputError("--export: serialising needs flatbuffers: pip install 'jaxmd_dp[export]'") from None
    try:
        exp = jax.export.export(fn, **kw)(*args)
    except (ValueError, NotImplementedError) as e:
        raise InputError(f"--export: jax.export failed ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    desc = {"natoms": int(natoms), "pbc": bool(pbc), "min_box_width": min_w if pbc else None,
            "platforms": list(exp.platforms), "jax": jax.__version__,
            "inputs": ["coord (nf, natoms, 3) float64 Å"] + (["box (nf, 3, 3) float64 Å"] if pbc else [])
            + ["atype (natoms,) int32"],
            "outputs": list(ExportedPrediction._fields)}
    return exp.serialize(), desc


class ExportedModel:
    """A frozen file's ``jax.export`` function, with host-side checks of the inputs it was exported for.

        f = load_exported("model.jaxdp")
        pred = f(coord, box, atype)        # coord (nf, natoms, 3) Å; box (nf, 3, 3) Å (None without PBC)
    """

    def __init__(self, exported, desc: dict, type_map: tuple[str, ...], source: str):
        self.exported, self.desc, self.type_map, self.source = exported, desc, type_map, source
        self.natoms, self.pbc = int(desc["natoms"]), bool(desc["pbc"])

    def __call__(self, coord, box=None, atype=None) -> ExportedPrediction:
        from jaxmd_dp.geometry.neighbor import _perp_widths

        coord = np.asarray(coord, np.float64)
        if coord.ndim == 2:
            coord = coord[None]
        if coord.shape[1:] != (self.natoms, 3):
            raise InputError(f"{self.source}: exported for {self.natoms} atoms, got coord of shape {coord.shape}")
        if atype is None:
            raise InputError(f"{self.source}: atype (natoms,) is required")
        atype = np.asarray(atype, np.int32).reshape(-1)
        if atype.shape != (self.natoms,) or atype.min() < 0 or atype.max() >= len(self.type_map):
            raise InputError(f"{self.source}: atype must be {self.natoms} indices into type_map {list(self.type_map)}")
        if self.pbc:
            if box is None:
                raise InputError(f"{self.source}: exported with periodic boundaries; box (nf, 3, 3) is required")
            box = np.broadcast_to(np.asarray(box, np.float64).reshape(-1, 3, 3), (coord.shape[0], 3, 3))
            w = float(_perp_widths(box).min())
            if w < self.desc["min_box_width"] - 1e-12:
                raise InputError(f"{self.source}: a box is {w:.3f} Å thick; this export reaches boxes of at least "
                                 f"{self.desc['min_box_width']} Å (re-freeze with --min-box-width)")
            out = self.exported.call(coord, np.ascontiguousarray(box), atype)
        else:
            out = self.exported.call(coord, atype)
        return ExportedPrediction(*(np.asarray(x) for x in out))


def load_exported(path: str | os.PathLike) -> ExportedModel:
    """The ``jax.export`` function stored by ``freeze --export`` (see :class:`ExportedModel`)."""
    import jax

    path = Path(path)
    meta = read_meta(path)
    desc = meta.get("exported")
    if not desc:
        raise InputError(f"{path}: holds no exported function (freeze it with --export --natoms N)")
    try:
        import flatbuffers  # noqa: F401  (jax.export's serialisation needs it)
    except ImportError:
        raise InputError(f"{path}: reading the exported function needs flatbuffers: "
                         "pip install 'jaxmd_dp[export]'") from None
    try:
        with zipfile.ZipFile(path) as z:
            blob = z.read(desc["file"])
        exported = jax.export.deserialize(bytearray(blob))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: cannot read the exported function ({type(e).__name__}: {e})") from None
    return ExportedModel(exported, desc, tuple(meta["hyper"]["type_map"]), str(path))


# ---------------------------------------------------------------------------------------------- freeze


def _read_source(model: str | os.PathLike):
    """(hyper, params, stats, info) from a frozen file, a model directory, or a training run/checkpoint."""
    path = Path(model)
    if not path.exists():
        raise InputError(f"{path}: no such model, checkpoint or training output directory")
    info: dict = {"source": str(path.absolute())}
    if path.is_file():
        hyper, params, stats = load_frozen(path)
        info["refrozen_from"] = read_meta(path).get("info", {})
        return hyper, params, stats, info
    from jaxmd_dp.model_io import load_model

    hyper, params, stats = load_model(path)
    if not (path / "model.json").is_file():  # a training output: record which checkpoint step was frozen
        try:
            from jaxmd_dp.train.checkpoint import checkpoint_steps, find_checkpoint_dir

            info["step"] = max(checkpoint_steps(find_checkpoint_dir(path)))
        except (InputError, OSError, ValueError):  # provenance only: never fail a freeze over it
            pass
    return hyper, params, stats, info


def freeze(model: str | os.PathLike, output: str | os.PathLike, export_natoms: int | None = None,
           pbc: bool = True, min_box_width: float | None = None, platforms: tuple[str, ...] | None = None) -> Path:
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
    p.add_argument("-m", "--model", "-c", "--checkpoint", dest="model", required=True,
                   help="training output directory, checkpoint directory or model directory")
    p.add_argument("-o", "--output", default="frozen_model.jaxdp", help="file to write (default frozen_model.jaxdp)")
    p.add_argument("--export", action="store_true",
                   help="also store a jax.export energy/force/virial function (needs --natoms)")
    p.add_argument("--natoms", type=int, default=None, help="number of atoms the exported function takes")
    p.add_argument("--nopbc", action="store_true", help="export for molecules without periodic boundaries")
    p.add_argument("--min-box-width", type=float, default=None,
                   help="thinnest box (face to face, Å) the exported function must handle (default: rcut)")
    p.add_argument("--platforms", default=None,
                   help="comma-separated jax.export platforms, e.g. cpu,cuda (default: this machine's)")
    args = p.parse_args(argv)
    if args.export and args.natoms is None:
        raise InputError("--export: give the number of atoms with --natoms N")
    if args.natoms is not None and not args.export:
        raise InputError("--natoms: only used with --export")
    platforms = tuple(x.strip() for x in args.platforms.split(",") if x.strip()) if args.platforms else None
    out = freeze(args.model, args.output, args.natoms if args.export else None, not args.nopbc,
                 args.min_box_width, platforms)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
