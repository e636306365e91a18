"""A model's energy/force/virial function serialised with ``jax.export`` (``freeze --export``)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.model.io import read_exported, read_meta


class ExportedPrediction(NamedTuple):
    """energy (nf,) eV; force (nf, natoms, 3) eV/Å; virial (nf, 9) eV; atom_energy (nf, natoms) eV;
    nneigh_max (len(sel),) most neighbours of each type any atom had, or of any type for a descriptor of
    mixed types (more than ``sel`` were dropped)."""

    energy: np.ndarray
    force: np.ndarray
    virial: np.ndarray
    atom_energy: np.ndarray
    nneigh_max: np.ndarray


def export_energy_force(
    hyper: ModelHyper,
    params,
    stats: Stats,
    natoms: int,
    pbc: bool = True,
    min_box_width: float | None = None,
    platforms: tuple[str, ...] | None = None,
):
    """Serialise the model's prediction for ``natoms`` atoms with ``jax.export``, weights baked in.

    The function is :func:`jaxmd_dp.model.evaluate.predict_frames` (the Evaluator's) for one fixed
    neighbour-list spec: ``f(coord (nf, natoms, 3), box (nf, 3, 3), atype (natoms,) int32)`` (without ``box``
    when ``pbc`` is False) → (energy, force, virial, atom_energy, nneigh_max); nf is symbolic (any number of
    frames), any atom types. Neighbours are found by brute force over the periodic images within reach of
    boxes whose face-to-face widths are at least ``min_box_width`` Å (default rcut: one image shell), with
    the jnp kernels (exportable to any platform).

    Returns (serialised bytes, description dict for the model file's ``exported``)."""
    import jax
    import jax.numpy as jnp

    from jaxmd_dp.geometry import neighbor
    from jaxmd_dp.model.evaluate import predict_frames
    from jaxmd_dp.runtime.inline_trace import inline_trace

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
        pred, nneigh_max, _ = predict_frames(hyper, spec, None, "jnp", params, stats, coord, box, atype)
        return (*pred, nneigh_max)

    (nf,) = jax.export.symbolic_shape("nf")
    coord = jax.ShapeDtypeStruct((nf, natoms, 3), jnp.float64)
    atype = jax.ShapeDtypeStruct((natoms,), jnp.int32)
    if pbc:
        fn, args = jax.jit(inline_trace(run)), (coord, jax.ShapeDtypeStruct((nf, 3, 3), jnp.float64), atype)
    else:
        fn, args = jax.jit(inline_trace(lambda c, t: run(c, None, t))), (coord, atype)
    kw = {} if platforms is None else {"platforms": tuple(platforms)}
    try:
        import flatbuffers  # noqa: F401  (jax.export's serialisation needs it)
    except ImportError:
        raise InputError("--export: serialising needs flatbuffers: pip install 'jaxmd_dp[export]'") from None
    try:
        exp = jax.export.export(fn, **kw)(*args)
    except (ValueError, NotImplementedError) as e:
        raise InputError(f"--export: jax.export failed ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    desc = {
        "natoms": int(natoms),
        "pbc": bool(pbc),
        "min_box_width": min_w if pbc else None,
        "platforms": list(exp.platforms),
        "jax": jax.__version__,
        "inputs": ["coord (nf, natoms, 3) float64 Å"]
        + (["box (nf, 3, 3) float64 Å"] if pbc else [])
        + ["atype (natoms,) int32"],
        "outputs": list(ExportedPrediction._fields),
    }
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
                raise InputError(
                    f"{self.source}: a box is {w:.3f} Å thick; this export reaches boxes of at least "
                    f"{self.desc['min_box_width']} Å (re-freeze with --min-box-width)"
                )
            out = self.exported.call(coord, np.ascontiguousarray(box), atype)
        else:
            out = self.exported.call(coord, atype)
        return ExportedPrediction(*(np.asarray(x) for x in out))


def load_exported(path: str | os.PathLike) -> ExportedModel:
    """The ``jax.export`` function stored by ``freeze --export`` (see :class:`ExportedModel`)."""
    import jax

    path = Path(path)
    desc, blob = read_exported(path)
    try:
        import flatbuffers  # noqa: F401  (jax.export's serialisation needs it)
    except ImportError:
        raise InputError(
            f"{path}: reading the exported function needs flatbuffers: pip install 'jaxmd_dp[export]'"
        ) from None
    try:
        exported = jax.export.deserialize(bytearray(blob))
    except (ValueError, TypeError) as e:
        raise InputError(f"{path}: cannot read the exported function ({type(e).__name__}: {e})") from None
    return ExportedModel(exported, desc, tuple(read_meta(path)["hyper"]["type_map"]), str(path))
