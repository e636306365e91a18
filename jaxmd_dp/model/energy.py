"""The energy model: atomic energies → energy, forces F = −∂E/∂r, virial.

E_i = F_{t(i)}(D(R_i)) + bias_{t(i)}: the environment matrix R of each atom (its neighbours' rows
s(r)·[1, x/r, y/r, z/r], :mod:`jaxmd_dp.geometry.env_mat`), normalised by the statistics davg/dstd, gives
the descriptor D (``hyper.descriptor``, :mod:`jaxmd_dp.model.descriptor`), and the fitting net of the
atom's type F_t (:mod:`jaxmd_dp.model.fitting`) its atomic energy. The energy is Σ_i E_i, the forces and
virial its derivatives in the coordinates and a strain of the cell (:func:`predict`).

Learned weights live in a Flax ``params`` tree (:class:`DeepPot`); what is computed from data once and
not trained lives in :class:`Stats` (environment-matrix davg/dstd and the per-type energy bias,
:func:`stats_from_data`). How the numbers are computed — per-type blocks, kernels, the training step's
rewrites — is the ``plan`` (:class:`~jaxmd_dp.model.plan.ExecutionPlan`); every plan gives the same numbers.
Units: coordinates and boxes Å, energies eV, forces eV/Å, virials eV.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.env_mat import env_mat, times_cell
from jaxmd_dp.geometry.stats import energy_bias
from jaxmd_dp.model.fast.pair_pack import Packing, empty_rows, kept_slots
from jaxmd_dp.model.fast.row_take import take
from jaxmd_dp.model.hyper import ModelHyper
from jaxmd_dp.model.nets import init_moments
from jaxmd_dp.model.plan import ExecutionPlan
from jaxmd_dp.runtime.inline_trace import inline_trace

__all__ = [
    "DeepPot",
    "ExecutionPlan",
    "ModelHyper",
    "Prediction",
    "Stats",
    "atomic_energy",
    "default_stats",
    "init_params",
    "param_shapes",
    "predict",
    "predict_merged",
    "stats_from_data",
    "type_capacity",
]

EXACT = ExecutionPlan()  # per-type nets on every atom, the default kernels, no rewrite


class Stats(NamedTuple):
    """Data statistics saved with a model (not trained).

    davg, dstd: the descriptor's environment-matrix shift and scale (``hyper.descriptor.stat_shape``:
    (ntypes, nnei, 4), per centre type, slot and column).
    energy_bias: (ntypes,) eV, added to every atomic energy of that type.
    """

    davg: jax.Array
    dstd: jax.Array
    energy_bias: jax.Array


def default_stats(hyper: ModelHyper) -> Stats:
    """Neutral statistics (davg 0, dstd 1, bias 0), before any data is seen."""
    shape = hyper.descriptor.stat_shape(hyper.ntypes)
    return Stats(np.zeros(shape), np.ones(shape), np.zeros(hyper.ntypes))


def stats_from_data(hyper: ModelHyper, frames, protect: float, scan=None, set_davg_zero: bool = False) -> Stats:
    """DeePMD-kit's statistics of sampled frames: the descriptor's davg/dstd
    (:meth:`~jaxmd_dp.model.descriptor.Descriptor.env_stats`) and the per-type energy bias (least squares,
    :func:`jaxmd_dp.geometry.stats.energy_bias`).

    frames: batches of :func:`jaxmd_dp.geometry.stats.sample_stat_frames`; protect: ``model.data_stat_protect``;
    scan: the trainer's neighbour scan, whose environment-matrix sums may stand in for a pass over the frames
    (:class:`~jaxmd_dp.geometry.neighbor_stat.NeighborStats`), or None; set_davg_zero:
    ``model.descriptor.set_davg_zero``. Raises ValueError when no frame has an energy label."""
    frames = list(frames)
    davg, dstd = hyper.descriptor.env_stats(frames, hyper.ntypes, protect, scan, set_davg_zero)
    return Stats(davg, dstd, energy_bias(frames, hyper.ntypes))


class DeepPot(nn.Module):
    """Normalised environment matrix R (nf, natoms, nnei, 4) + types → atomic energies (nf, natoms) eV,
    without the energy bias: the descriptor's module (``params["descriptor"]``), then the fitting nets
    (``params["fitting"]``)."""

    hyper: ModelHyper

    def setup(self):
        h = self.hyper
        self.descriptor = h.descriptor.module(h.ntypes)
        self.fitting = h.fitting.module(h.ntypes)

    def __call__(
        self,
        R: jax.Array,
        atype: jax.Array,
        capacity: tuple[int, ...] | None = None,
        packing: Packing | None = None,
        slots=None,
    ) -> jax.Array:
        """``slots``: the descriptor's :meth:`~jaxmd_dp.model.descriptor.Descriptor.slot_inputs`, or None."""
        D = (
            self.descriptor(R, atype, capacity, packing)
            if slots is None
            else self.descriptor(R, atype, capacity, packing, slots)
        )
        # the packed path is the training step's, reverse mode only (as fast.train_products and fast.row_take)
        return self.fitting(D, atype, capacity, reverse_only=packing is not None)


def init_params(hyper: ModelHyper, seed: int = 0, fitting_seed: int | None = None):
    """Fresh weights with DeePMD-kit's initialisation (:func:`nets.init_moments`), drawn on the host
    with numpy's generator seeded by ``seed``: nothing to compile (drawing with ``jax.random`` compiled
    one threefry per weight array, a noticeable share of every cold start), and the same weights on every
    platform.
    Weights are drawn leaf by leaf in the tree's (sorted) order and returned as host (numpy) arrays of the
    nets' dtypes: put them on the device with ``jax.device_put`` (``jnp.asarray`` compiles per shape).
    ``fitting_seed`` (``model.fitting_net.seed``): when given and not ``seed``, the fitting nets are drawn
    from a generator of their own seeded by it; otherwise they follow the descriptor's in the one stream."""
    rng = np.random.default_rng(seed)
    fit_rng = rng if fitting_seed is None or fitting_seed == seed else np.random.default_rng(fitting_seed)

    def draw(path, leaf):
        mean, std = init_moments(path[-1].key, leaf.shape)
        r = fit_rng if path[0].key == "fitting" else rng
        return np.asarray(mean + std * r.standard_normal(leaf.shape), leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, param_shapes(hyper))


@functools.lru_cache(maxsize=32)
def param_shapes(hyper: ModelHyper):
    """The weight tree's shapes and dtypes (``jax.ShapeDtypeStruct``), without computing anything."""
    return jax.eval_shape(
        inline_trace(lambda key, R, atype: DeepPot(hyper).init(key, R, atype)["params"]),
        jax.ShapeDtypeStruct((2,), jnp.uint32),
        jax.ShapeDtypeStruct((1, 1, hyper.nnei, 4), jnp.float64),
        jax.ShapeDtypeStruct((1, 1), jnp.int32),
    )


def atomic_energy(
    hyper: ModelHyper,
    params,
    stats: Stats,
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
    nlist,
    *,
    plan: ExecutionPlan = EXACT,
) -> jax.Array:
    """Atomic energies E_i: (nframes, natoms) eV, 0 for padding atoms (atype −1).

    coord: (nframes, natoms, 3) Å; box: (nframes, 3, 3) Å, or (nframes, natoms, 3, 3) one cell per atom
    (``geometry.env_mat``), or None; atype: (natoms,) or (nframes, natoms); nlist: a :class:`NeighborList`
    (or anything with ``idx`` and ``shift``) built for these coordinates, with ``plan.keep`` slots per
    type when the plan cuts them. plan: how to compute it (:class:`~jaxmd_dp.model.plan.ExecutionPlan`);
    the same energies with any plan.
    """
    nf, natoms = coord.shape[:2]
    atype = jnp.broadcast_to(atype, (nf, natoms))
    davg, dstd = stats.davg, stats.dstd
    pack, table = plan.pack, int(plan.table)
    fast = hyper.descriptor.fast_paths
    for wanted, path in ((pack is not None and not fast.pack, "packed"), (table and not fast.table, "table")):
        if wanted:
            raise ValueError(f"descriptor {hyper.descriptor.type_name} has no {path} path")
    keep = None if plan.keep is None or tuple(plan.keep) == tuple(hyper.sel) else tuple(plan.keep)  # sel: no cut
    if keep is not None:
        if pack is None and not table and not fast.cut:
            raise ValueError("keep needs pack, table or a cut list (the slots past keep are counted by their path)")
        slots = kept_slots(hyper.sel, keep)
        davg, dstd = jnp.asarray(davg)[:, slots], jnp.asarray(dstd)[:, slots]
    R = env_mat(coord, box, atype, nlist.idx, nlist.shift, hyper.rcut, hyper.rcut_smth, davg, dstd, plan.kernels)
    packing = (
        None
        if pack is None and not table and keep is None
        else Packing(
            nlist.idx >= 0,
            empty_rows(stats.davg, stats.dstd),
            None if pack is None else tuple(pack),
            keep,
            table,
            bool(plan.uniform_empty),
            None if table else plan.partner,
        )
    )
    slots = hyper.descriptor.slot_inputs(coord, box, atype, nlist)
    if fast.tiers and plan.keep is not None:  # the training step's plan (its lists' slots): its path
        packing = packing or Packing(None, empty_rows(stats.davg, stats.dstd), None)
    if fast.tiers and plan.tiers:
        e = _tiered_energies(hyper, params, R, atype, packing, slots, nlist.idx >= 0, plan.tiers)
    else:
        e = DeepPot(hyper).apply({"params": params}, R, atype, plan.capacity, packing, slots)
    e = e.astype(coord.dtype)
    e = e + jnp.asarray(stats.energy_bias, coord.dtype)[jnp.maximum(atype, 0)]
    return jnp.where(atype >= 0, e, 0.0)


def _tiered_energies(hyper: ModelHyper, params, R, atype, packing: Packing, slots, present, tiers) -> jax.Array:
    """:class:`DeepPot`'s atomic energies (nf, natoms) with each frame's atoms in tiers
    (``ExecutionPlan.tiers``, descriptors with ``FastPaths.tiers``: an atom's energy reads its own slots
    only). The atoms are sorted by their neighbour count (``present`` (nf, natoms, nkept), the list's filled
    slots, which are each atom's first), most first; tier g, ``tiers[g]`` = (atoms, slots), takes the next
    ``atoms`` of every frame and runs with their first ``slots`` slots, the rest counted as cut slots
    (``Packing.keep``). Rows move between the atoms' order and the tiers' by gathers both ways
    (:func:`~jaxmd_dp.model.fast.row_take.take`), so derivatives reach R and the slot inputs."""
    nf, n = atype.shape
    rank = jnp.argsort(jnp.argsort(-jnp.sum(present, axis=-1), axis=-1, stable=True), axis=-1)  # (nf, n)
    start = np.cumsum([0] + [a for a, _ in tiers])
    if start[-1] != n:
        raise ValueError(f"tiers {tiers} do not hold the {n} atoms of a frame")
    tier = jnp.searchsorted(jnp.asarray(start[1:]), rank, side="right")  # each atom's tier
    first = jnp.asarray(nf * start[:-1])[tier] + jnp.arange(nf)[:, None] * jnp.asarray(np.diff(start))[tier]
    where = (first + rank - jnp.asarray(start[:-1])[tier]).reshape(1, nf * n)  # each atom's row in tier order
    back = jnp.zeros_like(where).at[0, where[0]].set(jnp.arange(nf * n, dtype=where.dtype))  # its inverse
    every = jnp.ones_like(where, bool)
    to_tiers, to_atoms = ((back, every),), ((where, every),)

    def rows(a):  # (nf, n, ...) → (nf · n, ...) in tier order; float arrays with derivatives
        a = a.reshape((1, nf * n) + a.shape[2:])
        return take(a, to_tiers, to_atoms)[0] if jnp.issubdtype(a.dtype, jnp.floating) else a[0, back[0]]

    R, atype, slots = rows(R), rows(atype), jax.tree_util.tree_map(rows, slots)
    model, e, off = DeepPot(hyper), [], 0
    for atoms, kept in tiers:
        size = nf * atoms
        part = lambda a, k=kept: a[off : off + size, :k][None]  # noqa: E731  (one frame of the tier's atoms)
        pk = packing._replace(mask=None, keep=None if kept == hyper.nnei else (kept,))
        s_t = jax.tree_util.tree_map(part, slots)
        e.append(model.apply({"params": params}, part(R), atype[None, off : off + size], None, pk, s_t)[0])
        off += size
    return take(jnp.concatenate(e)[None], to_atoms, to_tiers)[0].reshape(nf, n)


def type_capacity(atypes, ntypes: int) -> tuple[int, ...]:
    """Most atoms of each type in any of ``atypes`` (each (natoms,) or (nframes, natoms)): the static
    ``capacity`` of an :class:`~jaxmd_dp.model.plan.ExecutionPlan`."""
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


def strain_derivatives(
    energies: Callable[[jax.Array, jax.Array], jax.Array], coord: jax.Array, nstrains: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Atomic energies, forces and virials of a function of coordinates and strains.

    energies(c, strain) → atomic energies (nf, natoms) eV of coordinates c (as ``coord``, Å) under the
    homogeneous strains I + ε (nstrains, 3, 3), ε = 0, which the caller applies to the atoms and their
    cells (row vectors: r → r (I + ε), box → box (I + ε)). Returns (atomic energies, forces −∂E/∂c eV/Å
    shaped as ``coord``, virials (nstrains, 9) eV): the virial is −∂E/∂ε transposed to DeePMD-kit's layout
    V[k, j] = Σ_i F_ik r_ij (over atoms and periodic images), flattened row-major.
    """

    def total(c, eps):
        ae = energies(c, jnp.eye(3, dtype=c.dtype) + eps)
        return jnp.sum(ae), ae

    eps0 = jnp.zeros((nstrains, 3, 3), coord.dtype)
    (_, ae), (dc, de) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(coord, eps0)
    return ae, -dc, -jnp.swapaxes(de, -1, -2).reshape(nstrains, 9)


def predict(
    hyper: ModelHyper,
    params,
    stats: Stats,
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
    nlist,
    *,
    plan: ExecutionPlan = EXACT,
) -> Prediction:
    """Energy, forces and virial, DeePMD-kit's definitions.

    Forces are −∂E/∂r, the virial −∂E/∂ε under a homogeneous strain of each frame
    (:func:`strain_derivatives`). Arguments as :func:`atomic_energy`.
    """

    def energies(c, strain):
        c2 = jnp.einsum("fni,fij->fnj", c, strain)
        b2 = None if box is None else jnp.einsum("fki,fij->fkj", box, strain)
        return atomic_energy(hyper, params, stats, c2, b2, atype, nlist, plan=plan)

    ae, force, virial = strain_derivatives(energies, coord, coord.shape[0])
    return Prediction(jnp.sum(ae, axis=-1), force, virial, ae)


def predict_merged(
    hyper: ModelHyper,
    params,
    stats: Stats,
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
    frame: jax.Array,
    nlist,
    nframes: int,
    *,
    plan: ExecutionPlan = EXACT,
) -> Prediction:
    """:func:`predict` for several frames laid end to end in one list of atoms (a merged batch, see
    :mod:`jaxmd_dp.train.merge`): the same numbers, one array shape for frames of any size.

    coord: (1, atoms, 3) Å; atype: (1, atoms) int, −1 for padding; frame: (atoms,) int, each atom's
    frame; box: (nframes, 3, 3) Å or None; nlist: idx (1, atoms, nnei) into the merged atoms (a neighbour
    is always in the centre's frame), shift (1, atoms, nnei, 3) images in cell vectors of that frame's
    box. Returns energy (nframes,) eV, force (1, atoms, 3) eV/Å, virial (nframes, 9) eV, atom_energy
    (1, atoms) eV; padding frames get 0. Each frame has its own strain ε_f: atom i moves as
    r_i (I + ε_f(i)), its images with the frame's box box_f (I + ε_f). The environment matrix is the jnp
    one whatever ``plan.kernels`` says (the Pallas kernel takes one box per frame).
    """
    plan = plan._replace(kernels="jnp")

    def energies(c, strain):  # strain: (nframes, 3, 3)
        c2 = times_cell(c[0], strain[frame])[None]
        # (1, atoms, 3, 3): each atom's cell, its frame's box under that frame's strain
        cells = None if box is None else times_cell(box.astype(c.dtype), strain[:, None])[frame][None]
        return atomic_energy(hyper, params, stats, c2, cells, atype, nlist, plan=plan)

    ae, force, virial = strain_derivatives(energies, coord, nframes)
    of_frame = (frame[None, :] == jnp.arange(nframes)[:, None]).astype(ae.dtype)  # (nframes, atoms)
    return Prediction(of_frame @ ae[0], force, virial, ae)
