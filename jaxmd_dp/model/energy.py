"""The se_e2_a energy model: atomic energies → energy, forces F = −∂E/∂r, virial.

Learned weights live in a Flax ``params`` tree (:class:`DeepPot`); what is computed from data once and
not trained lives in :class:`Stats` (environment-matrix davg/dstd and the per-type energy bias).
Units: coordinates and boxes Å, energies eV, forces eV/Å, virials eV.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.env_mat import env_mat, times_cell
from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.model.fitting import EnergyFitting
from jaxmd_dp.model.nets import init_moments
from jaxmd_dp.model.pair_pack import Packing, empty_rows, kept_slots
from jaxmd_dp.model.se_e2_a import DescriptorSeA

DTYPES = {"float64": jnp.float64, "float32": jnp.float32, "bfloat16": jnp.bfloat16, "default": jnp.float64}


@dataclasses.dataclass(frozen=True)
class ModelHyper:
    """Static hyper-parameters of an se_e2_a energy model (hashable; DeePMD-kit's names)."""

    type_map: tuple[str, ...]
    sel: tuple[int, ...]
    rcut: float = 6.0
    rcut_smth: float = 0.5
    neuron: tuple[int, ...] = (25, 50, 100)
    axis_neuron: int = 16
    type_one_side: bool = True
    resnet_dt: bool = False
    activation: str = "tanh"
    fit_neuron: tuple[int, ...] = (240, 240, 240)
    fit_resnet_dt: bool = True
    fit_activation: str = "tanh"
    precision: str = "float64"  # descriptor (embedding nets)
    fit_precision: str = "float64"

    @property
    def ntypes(self) -> int:
        return len(self.type_map)

    @property
    def nnei(self) -> int:
        return int(sum(self.sel))

    @property
    def dim_descriptor(self) -> int:
        return self.neuron[-1] * self.axis_neuron

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "ModelHyper":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    @classmethod
    def from_deepmd(cls, model: dict) -> "ModelHyper":
        """From the ``model`` section of a DeePMD-kit input/out.json (or ``Config.model.to_dict()``);
        ``descriptor.sel`` must be a list. Raises KeyError/ValueError on a malformed section."""
        d, f = model["descriptor"], model["fitting_net"]
        if d.get("type", "se_e2_a") not in ("se_e2_a", "se_a"):
            raise ValueError(f"descriptor type {d.get('type')!r} is not se_e2_a")
        if not isinstance(d["sel"], (list, tuple)):
            raise ValueError(f"descriptor sel is {d['sel']!r}, not a list")
        prec = lambda p: "float64" if p in (None, "default") else p  # noqa: E731
        return cls(
            type_map=tuple(model["type_map"]),
            sel=tuple(int(s) for s in d["sel"]),
            rcut=float(d.get("rcut", 6.0)),
            rcut_smth=float(d.get("rcut_smth", 0.5)),
            neuron=tuple(d.get("neuron", (10, 20, 40))),
            axis_neuron=int(d.get("axis_neuron", 4)),
            type_one_side=bool(d.get("type_one_side", False)),  # DeePMD-kit's default
            resnet_dt=bool(d.get("resnet_dt", False)),
            activation=d.get("activation_function", "tanh"),
            fit_neuron=tuple(f.get("neuron", (120, 120, 120))),
            fit_resnet_dt=bool(f.get("resnet_dt", True)),
            fit_activation=f.get("activation_function", "tanh"),
            precision=prec(d.get("precision")),
            fit_precision=prec(f.get("precision")),
        )


class Stats(NamedTuple):
    """Data statistics saved with a model (not trained).

    davg, dstd: (ntypes, nnei, 4) environment-matrix shift and scale per centre type and slot.
    energy_bias: (ntypes,) eV, added to every atomic energy of that type.
    """

    davg: jax.Array
    dstd: jax.Array
    energy_bias: jax.Array


def default_stats(hyper: ModelHyper) -> Stats:
    """Neutral statistics (davg 0, dstd 1, bias 0), before any data is seen."""
    shape = (hyper.ntypes, hyper.nnei, 4)
    return Stats(np.zeros(shape), np.ones(shape), np.zeros(hyper.ntypes))


class DeepPot(nn.Module):
    """Normalised environment matrix R (nf, natoms, nnei, 4) + types → atomic energies (nf, natoms) eV,
    without the energy bias."""

    hyper: ModelHyper

    def setup(self):
        h = self.hyper
        self.descriptor = DescriptorSeA(
            h.ntypes, h.sel, h.neuron, h.axis_neuron, h.type_one_side, h.resnet_dt, h.activation, DTYPES[h.precision]
        )
        self.fitting = EnergyFitting(h.ntypes, h.fit_neuron, h.fit_resnet_dt, h.fit_activation, DTYPES[h.fit_precision])

    def __call__(self, R: jax.Array, atype: jax.Array, capacity: tuple[int, ...] | None = None,
                 packing: Packing | None = None) -> jax.Array:
        # the packed path is the training step's, reverse mode only (as model.train_products and row_take.take)
        return self.fitting(self.descriptor(R, atype, capacity, packing), atype, capacity,
                            reverse_only=packing is not None)


def init_params(hyper: ModelHyper, seed: int = 0):
    """Fresh weights with DeePMD-kit's initialisation (:func:`nets.init_moments`), drawn on the host
    with numpy's generator seeded by ``seed``: nothing to compile (drawing with ``jax.random`` compiled
    one threefry per weight array, 2–3 s of every cold start), and the same weights on every platform.
    Weights are drawn leaf by leaf in the tree's (sorted) order and returned as host (numpy) arrays of the
    nets' dtypes: put them on the device with ``jax.device_put`` (``jnp.asarray`` compiles per shape)."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        mean, std = init_moments(path[-1].key, leaf.shape)
        return np.asarray(mean + std * rng.standard_normal(leaf.shape), leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, param_shapes(hyper))


@functools.lru_cache(maxsize=32)
def param_shapes(hyper: ModelHyper):
    """The weight tree's shapes and dtypes (``jax.ShapeDtypeStruct``), without computing anything."""
    return jax.eval_shape(inline_trace(lambda key, R, atype: DeepPot(hyper).init(key, R, atype)["params"]),
                          jax.ShapeDtypeStruct((2,), jnp.uint32),
                          jax.ShapeDtypeStruct((1, 1, hyper.nnei, 4), jnp.float64),
                          jax.ShapeDtypeStruct((1, 1), jnp.int32))


def atomic_energy(
    hyper: ModelHyper, params, stats: Stats, coord: jax.Array, box: jax.Array | None, atype: jax.Array, nlist,
    capacity: tuple[int, ...] | None = None, kernels: str | None = None, pack: tuple[int, ...] | None = None,
    keep: tuple[int, ...] | None = None, table: int = 0, uniform_empty: bool = False, partner: jax.Array | None = None,
) -> jax.Array:
    """Atomic energies E_i: (nframes, natoms) eV, 0 for padding atoms (atype −1).

    coord: (nframes, natoms, 3) Å; box: (nframes, 3, 3) Å or None; atype: (natoms,) or (nframes, natoms);
    nlist: a :class:`NeighborList` (or anything with ``idx`` and ``shift``) built for these coordinates.
    capacity: (static) most atoms of each type in a frame, so per-type nets run on their atoms only
    (:func:`type_capacity`); default natoms for every type.
    kernels: environment-matrix implementation, "pallas" | "jnp" | "auto" (see ``geometry.env_mat``).
    pack: (static) run the embedding nets on real pairs only, in blocks of this many rows per frame for
    each neighbour type (:mod:`jaxmd_dp.model.pair_pack`); every frame must have at most that many real
    pairs in each type's section (``pair_pack.pair_counts``). Same energies as without.
    keep: (static, with ``pack`` or ``table``) ``nlist`` holds only the first keep[t] slots of each type's
    section (a list built with sel = keep, :func:`pair_pack.keep_sizes`); every atom must have at most
    keep[t] neighbours of type t. Same energies as without.
    table: (static) > 0: Rᵀ·G from a table of this many nodes of each embedding net instead of the nets
    on every pair (:mod:`jaxmd_dp.model.embed_table`; the training option ``training.embedding_table``;
    ``pack`` is then not used), 0: exact.
    uniform_empty: (static, with ``pack`` or ``table``) the statistics give every slot of a neighbour
    type's section the same empty row (:func:`pair_pack.uniform_empty` of ``stats``): the empty slots'
    share is then computed from one row per section. Same energies as without.
    """
    nf, natoms = coord.shape[:2]
    atype = jnp.broadcast_to(atype, (nf, natoms))
    davg, dstd = stats.davg, stats.dstd
    keep = None if keep is None or tuple(keep) == tuple(hyper.sel) else tuple(keep)  # equal to sel: no cut
    if keep is not None:
        if pack is None and not table:
            raise ValueError("keep needs pack or table (the slots past keep are counted by their path)")
        slots = kept_slots(hyper.sel, keep)
        davg, dstd = jnp.asarray(davg)[:, slots], jnp.asarray(dstd)[:, slots]
    R = env_mat(coord, box, atype, nlist.idx, nlist.shift, hyper.rcut, hyper.rcut_smth, davg, dstd, kernels)
    packing = None if pack is None and not table else Packing(
        nlist.idx >= 0, empty_rows(stats.davg, stats.dstd), None if pack is None else tuple(pack), keep, int(table),
        bool(uniform_empty), None if table else partner)
    e = DeepPot(hyper).apply({"params": params}, R, atype, capacity, packing).astype(coord.dtype)
    e = e + jnp.asarray(stats.energy_bias, coord.dtype)[jnp.maximum(atype, 0)]
    return jnp.where(atype >= 0, e, 0.0)


def type_capacity(atypes, ntypes: int) -> tuple[int, ...]:
    """Most atoms of each type in any of ``atypes`` (each (natoms,) or (nframes, natoms)): the static
    ``capacity`` argument of :func:`predict`."""
    cap = np.zeros(ntypes, int)
    for a in atypes:
        a = np.asarray(a).reshape(-1, np.shape(a)[-1])
        for t in range(ntypes):
            cap[t] = max(cap[t], int((a == t).sum(axis=-1).max(initial=0)))
    return tuple(int(c) for c in cap)


class Prediction(NamedTuple):
    """energy (nf,) eV; force (nf, natoms, 3) eV/Å; virial (nf, 9) eV, row-major V[k, j] = Σ F_k r_j;
    atom_energy (nf, natoms) eV."""

    energy: jax.Array
    force: jax.Array
    virial: jax.Array
    atom_energy: jax.Array


def predict(
    hyper: ModelHyper, params, stats: Stats, coord: jax.Array, box: jax.Array | None, atype: jax.Array, nlist,
    capacity: tuple[int, ...] | None = None, kernels: str | None = None, pack: tuple[int, ...] | None = None,
    keep: tuple[int, ...] | None = None, table: int = 0, uniform_empty: bool = False, partner: jax.Array | None = None,
) -> Prediction:
    """Energy, forces and virial, DeePMD-kit's definitions.

    Forces are −∂E/∂r. The virial is −∂E/∂ε under the homogeneous strain r → r(I + ε),
    box → box(I + ε) (row vectors), transposed to DeePMD-kit's layout V[k, j] = Σ_i F_ik r_ij (over
    atoms and periodic images), flattened row-major to (nf, 9). ``pack``, ``keep``, ``table``,
    ``uniform_empty``, ``partner``: see :func:`atomic_energy`.
    """
    nf = coord.shape[0]

    def total(c, eps):
        strain = jnp.eye(3, dtype=c.dtype) + eps
        c2 = jnp.einsum("fni,fij->fnj", c, strain)
        b2 = None if box is None else jnp.einsum("fki,fij->fkj", box, strain)
        ae = atomic_energy(hyper, params, stats, c2, b2, atype, nlist, capacity, kernels, pack, keep, table,
                           uniform_empty, partner)
        return jnp.sum(ae), ae

    eps0 = jnp.zeros((nf, 3, 3), coord.dtype)
    (_, ae), (dc, de) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(coord, eps0)
    virial = -jnp.swapaxes(de, -1, -2).reshape(nf, 9)
    return Prediction(jnp.sum(ae, axis=-1), -dc, virial, ae)


def predict_merged(
    hyper: ModelHyper, params, stats: Stats, coord: jax.Array, box: jax.Array | None, atype: jax.Array,
    frame: jax.Array, nlist, nframes: int, capacity: tuple[int, ...] | None = None,
    pack: tuple[int, ...] | None = None, keep: tuple[int, ...] | None = None, table: int = 0,
    uniform_empty: bool = False, partner: jax.Array | None = None,
) -> Prediction:
    """:func:`predict` for several frames laid end to end in one list of atoms (a merged batch, see
    :mod:`jaxmd_dp.train.merge`): the same numbers, one array shape for frames of any size.

    coord: (1, atoms, 3) Å; atype: (1, atoms) int, −1 for padding; frame: (atoms,) int, each atom's
    frame; box: (nframes, 3, 3) Å or None; nlist: idx (1, atoms, nnei) into the merged atoms (a neighbour
    is always in the centre's frame), shift (1, atoms, nnei, 3) images in cell vectors of that frame's
    box. Returns energy (nframes,) eV, force (1, atoms, 3) eV/Å, virial (nframes, 9) eV, atom_energy
    (1, atoms) eV; padding frames get 0. Each frame has its own strain ε_f (see :func:`predict`): atom i
    moves as r_i (I + ε_f(i)), its images with the frame's box box_f (I + ε_f). The environment matrix
    is the jnp one (the Pallas kernel takes one box per frame).
    """

    def total(c, eps):
        strain = jnp.eye(3, dtype=c.dtype) + eps  # (nframes, 3, 3)
        c2 = times_cell(c[0], strain[frame])[None]
        cells = None if box is None else times_cell(box.astype(c.dtype), strain[:, None])[frame][None]  # (1, atoms, 3, 3)
        ae = atomic_energy(hyper, params, stats, c2, cells, atype, nlist, capacity, "jnp", pack, keep, table,
                           uniform_empty, partner)
        return jnp.sum(ae), ae

    eps0 = jnp.zeros((nframes, 3, 3), coord.dtype)
    (_, ae), (dc, de) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(coord, eps0)
    of_frame = (frame[None, :] == jnp.arange(nframes)[:, None]).astype(ae.dtype)  # (nframes, atoms)
    virial = -jnp.swapaxes(de, -1, -2).reshape(nframes, 9)
    return Prediction(of_frame @ ae[0], -dc, virial, ae)
