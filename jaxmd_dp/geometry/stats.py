"""Data statistics of an se_e2_a model, as DeePMD-kit (3.x, PyTorch backend) computes them.

Three pure functions, used once before training:

- :func:`sample_stat_frames`: which frames the statistics see (DeePMD-kit's ``make_stat_input``).
- :func:`env_mat_stats`: the environment-matrix shift/scale ``davg``/``dstd`` (``EnvMatStatSe``).
- :func:`energy_bias`: the per-type energy bias (``compute_stats_from_redu``).

Environment-matrix statistics (deepmd/dpmodel/utils/env_mat_stat.py ``EnvMatStatSe.iter`` /
``__call__``, deepmd/utils/env_mat_stat.py ``StatItem``, used by deepmd/pt/model/descriptor/se_a.py
``DescrptBlockSeA.compute_input_stats``). For every sampled frame, every centre atom i of type t and
every one of the nnei = sum(sel) neighbour slots (empty slots included, their row is 0), the
unnormalised row is w(r)·[1/r, x/r², y/r², z/r²]. Per centre type t, DeePMD-kit pools raw sums over
all frames of all systems (it does not average per-frame or per-system statistics):

    s-part: N_r = nnei · (number of type-t centres), S_r = Σ s, Q_r = Σ s²   (s = w/r, 1/Å)
    a-part: N_a = 3 N_r, S_a = Σ over x/r², y/r², z/r², Q_a = Σ of their squares   (1/Å)
    davg[t, :, 0] = S_r / N_r,          davg[t, :, 1:4] = 0
    dstd[t, :, 0] = std(S_r, Q_r, N_r), dstd[t, :, 1:4] = std(S_a, Q_a, N_a)
    std(S, Q, N) = sqrt(max(Q/N − (S/N)², 0)), raised to ``protect`` when below it (data_stat_protect)

(the a-part std is taken around its own mean S_a/N_a although davg stores 0 there; with
``set_davg_zero`` davg is 0 in every slot and dstd is the same, still taken around the data's mean). A type with no
centre atom in the sample gets davg 0 and dstd 0.1 (``StatItem`` defaults). Every slot of a type gets
the same values. Neighbours come from ``neighbor.allocate``/``build`` (the nearest sel[t] of each type);
DeePMD-kit first keeps the sum(sel) nearest of any type, then sel[t] per type, which differs only for
an atom with more than sum(sel) neighbours within rcut (an overflowing sel, which DeePMD-kit warns of).

Energy bias (deepmd/utils/out_stat.py ``compute_stats_from_redu`` via deepmd/pt/utils/stat.py
``compute_output_stats``, called by base_atomic_model.py ``compute_or_load_out_stat`` →
``change_out_bias(..., "set-by-statistic")``): ``np.linalg.lstsq(counts, E, rcond)`` with counts the
(nframes, ntypes) atoms per type of every sampled frame with an energy label and E (nframes,) eV.
Nothing special is done for one type or for a singular count matrix (e.g. every frame with the same
composition): lstsq returns its minimum-norm solution, and types absent from the sample get 0.

Units: Å, eV. float64 throughout.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.data.sampler import DataSampler, make_batch, resolve_batch_sizes
from jaxmd_dp.data.system import System
from jaxmd_dp.geometry.env_mat import env_rows, pair_vectors, smooth_weight
from jaxmd_dp.geometry.neighbor import (
    NeighborSpec,
    allocate,
    build,
    candidates_per_atom,
    reduce_candidates,
    reduction_jit,
)

DEFAULT_STD = 0.1  # StatItem.compute_std default when a type has no centre atom

__all__ = [
    "sample_stat_frames",
    "sample_stat_indices",
    "env_mat_stats",
    "env_mat_sums",
    "scanned_sums",
    "stats_from_sums",
    "energy_bias",
]


# ----------------------------------------------------------------------------- frame sampling
def sample_stat_frames(
    data: DataSampler | Sequence[System],
    nbatch: int,
    seed: int = 0,
    batch_size: int | str | Sequence[int] = "auto",
) -> list[dict]:
    """The frames DeePMD-kit's statistics use: up to ``nbatch`` batches from every system.

    DeePMD-kit pt (deepmd/pt/utils/stat.py ``make_stat_input``) reads, for each system, the first
    min(nbatch, ceil(nframes / bs)) batches of a fresh shuffled ``DataLoader`` over that system
    (batch size bs = the system's training batch size, no drop_last): frames drawn without
    replacement, in a random order. Here the permutation comes from ``np.random.default_rng(seed)``
    (DeePMD-kit's torch RNG stream cannot be reproduced, so the chosen frames differ from its own).

    Args:
      data: a :class:`DataSampler` (its systems and batch sizes are used; its own RNG is not touched)
        or a list of :class:`System` (then ``batch_size`` is resolved as the training config does).
      nbatch: ``data_stat_nbatch``, batches per system (>= 1).
      seed: seed of the permutation.
      batch_size: only for a list of systems; see ``resolve_batch_sizes``.

    Returns:
      One batch dict per system (the system's sampled batches concatenated, as DeePMD-kit does),
      from :func:`jaxmd_dp.data.sampler.make_batch`: coord (nf, natoms, 3) Å, box (nf, 3, 3) Å,
      atype (natoms,), energy (nf,) eV, find_energy, pbc, ...
    """
    if isinstance(data, DataSampler):
        systems, sizes = data.systems, data.batch_sizes
    else:
        systems = list(data)
        sizes = resolve_batch_sizes(batch_size, [s.natoms for s in systems])
    idx = sample_stat_indices([s.nframes for s in systems], sizes, nbatch, seed)
    return [make_batch(system, i, k) for k, (system, i) in enumerate(zip(systems, idx))]


def sample_stat_indices(nframes: Sequence[int], batch_sizes: Sequence[int], nbatch: int, seed: int = 0) -> list:
    """The frame indices (one int array per system) that :func:`sample_stat_frames` takes from systems of
    ``nframes`` frames with these batch sizes; known before any frame is read (the trainer's neighbour
    scan computes the statistics' sums of exactly these frames)."""
    if nbatch < 1:
        raise ValueError(f"data_stat_nbatch must be >= 1, got {nbatch}")
    rng = np.random.default_rng(seed)
    out = []
    for nf, bs in zip(nframes, batch_sizes):
        nbat = min(int(nbatch), -(-nf // int(bs)))
        perm = rng.permutation(nf)
        out.append(perm[: min(nf, nbat * int(bs))])
    return out


# ----------------------------------------------------------------------------- env-matrix statistics
def _batch_box(batch: dict) -> np.ndarray | None:
    """(nf, 3, 3) box, or None for a non-periodic batch (``pbc`` False, or no/all-zero box)."""
    box = batch.get("box")
    if box is None or not batch.get("pbc", True):
        return None
    box = np.asarray(box, np.float64).reshape(-1, 3, 3)
    return box if np.any(box) else None


@reduction_jit(static_argnums=(0, 1, 2, 3))
def _chunk_sums_candidates(spec: NeighborSpec, rcut_smth: float, ntypes: int, has_box: bool, coord, box, atype):
    """:func:`_chunk_sums` straight from the candidate pairs within rcut, without selecting them into
    ``sel`` slots (several times cheaper). Equal to it whenever no atom has more neighbours of a type
    than ``sel``; returns (sums (nf, ntypes, 5), whether some type overflowed its sel in this chunk).

    With s = w/r and a = w·d/r² per pair: S_a = Σ w (x + y + z)/r² and Q_a = Σ w² (x² + y² + z²)/r⁴ =
    Σ s² = Q_r. Frame by frame (:func:`~jaxmd_dp.geometry.neighbor.reduce_candidates`)."""

    def reduce(c, f_atype):
        over = jnp.any(c.nneigh > jnp.asarray(spec.sel, jnp.int32))
        return candidate_sums(c, f_atype, ntypes, rcut_smth, spec.rcut), over

    sums, over = reduce_candidates(spec, reduce, coord, box if has_box else None, atype)
    return sums, jnp.any(over)


def candidate_sums(c, atype, ntypes: int, rcut_smth: float, rcut: float):
    """One frame's raw sums (ntypes, 5) [centres, S_r, Q_r, S_a, Q_a] from its candidate pairs ``c`` (a
    :class:`~jaxmd_dp.geometry.neighbor.Candidates` of one frame) and atype (1, natoms): every neighbour
    within rcut counts, so equal to the sel-slot sums when no atom overflows sel. Used by
    :func:`_chunk_sums_candidates` and by the trainer's neighbour scan (``neighbor_stat``, which sums the
    statistics' frames in the same pass as its counts)."""
    r2 = jnp.where(c.valid, c.r2, 1.0)
    r = jnp.sqrt(r2)
    w = smooth_weight(r, rcut_smth, rcut)
    s = jnp.where(c.valid, w / r, 0.0)
    a = jnp.where(c.valid, w / r2 * (c.d[0] + c.d[1] + c.d[2]), 0.0)
    q = jnp.sum(s * s, axis=(-2, -1))
    return _per_type(atype, ntypes, jnp.sum(s, axis=(-2, -1)), q, jnp.sum(a, axis=(-2, -1)), q)[0]


def scanned_sums(frames: Iterable[dict], frame_sums: Sequence[np.ndarray], nnei: int) -> np.ndarray | None:
    """:func:`env_mat_sums` of ``frames`` (batches of :func:`sample_stat_frames`, with ``sys_index`` and
    ``frames``) from per-frame sums already computed: ``frame_sums[i]`` (nframes of system i, ntypes, 5)
    from the neighbour scan, NaN for frames it did not sum (then None is returned). Equal to
    :func:`env_mat_sums` when no atom of these frames has more neighbours of a type than sel (the caller
    checks)."""
    total = 0.0
    for batch in frames:
        total = total + np.sum(frame_sums[batch["sys_index"]][batch["frames"]], axis=0)
    total = np.array(total, np.float64)
    if not np.all(np.isfinite(total)):
        return None
    total[..., 0] *= nnei
    return total


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _chunk_sums(spec: NeighborSpec, rcut_smth: float, ntypes: int, has_box: bool, coord, box, atype):
    """Per-frame, per-type raw sums of one chunk of frames: (nf, ntypes, 5) =
    [centres, S_r, Q_r, S_a, Q_a]; atype (nf, natoms)."""
    b = box if has_box else None
    nl = build(spec, coord, b, atype, order="any")  # sums over slots: the slot order does not matter
    d = pair_vectors(coord, b, nl.idx, nl.shift)
    rows = env_rows(d, nl.idx >= 0, spec.rcut, rcut_smth)  # (nf, natoms, nnei, 4), empty slots 0
    s, a = rows[..., 0], rows[..., 1:]
    return _per_type(
        atype,
        ntypes,
        jnp.sum(s, axis=-1),
        jnp.sum(s * s, axis=-1),
        jnp.sum(a, axis=(-1, -2)),
        jnp.sum(a * a, axis=(-1, -2)),
    )


def _per_type(atype, ntypes: int, s_r, q_r, s_a, q_a):
    """Per-atom sums (nf, natoms) each -> per-frame, per-centre-type [centres, S_r, Q_r, S_a, Q_a]:
    (nf, ntypes, 5); padding atoms (type −1) count for no type."""
    per_atom = jnp.stack([jnp.ones_like(s_r), s_r, q_r, s_a, q_a], axis=-1)  # (nf, natoms, 5)
    onehot = (atype[..., None] == jnp.arange(ntypes)).astype(s_r.dtype)
    return jnp.einsum("fat,fak->ftk", onehot, per_atom)


def env_mat_sums(
    frames: Iterable[dict],
    hyper,
    per_frame: bool = False,
    max_pairs: int = 4_000_000,
    method: str = "auto",
) -> np.ndarray:
    """DeePMD-kit's raw environment-matrix sums per centre type (see the module doc).

    Args:
      frames: batches (dicts) with coord (nb, natoms, 3) Å, box (nb, 3, 3) Å (all zeros, or
        ``pbc`` False, for a non-periodic batch), atype (natoms,) or (nb, natoms) int (−1 = padding,
        neither centre nor neighbour).
      hyper: anything with ``rcut``, ``rcut_smth`` (Å), ``sel`` and ``ntypes`` (a ``ModelHyper``).
      per_frame: return the sums of every frame instead of their total.
      max_pairs: bound on centre × candidate pairs per jitted call (memory). Frames with the same atom
        count and periodicity, from all batches, share one neighbour spec and go through one jitted
        function in equal chunks (the last padded), so each such group compiles once.
      method: neighbour-list method for ``neighbor.allocate``.

    Returns:
      (ntypes, 5) float64, or (nframes, ntypes, 5) with ``per_frame``, in the order of ``frames``:
      [N_r, S_r, Q_r, S_a, Q_a] with N_r = nnei · (centres of the type) and N_a = 3 N_r. Sums add
      up over frames (DeePMD-kit pools them); :func:`stats_from_sums` turns them into davg, dstd.
    """
    ntypes, nnei = int(hyper.ntypes), int(sum(hyper.sel))
    coords, boxes, atypes = [], [], []
    for batch in frames:
        coord = np.asarray(batch["coord"], np.float64)
        coord = coord.reshape(-1, coord.shape[-2], 3)
        nf, natoms = coord.shape[:2]
        box = _batch_box(batch)
        coords.append(coord)
        boxes.append(box)
        atypes.append(np.broadcast_to(np.asarray(batch["atype"], np.int32), (nf, natoms)))
    nframes = [c.shape[0] for c in coords]
    sums = np.zeros((sum(nframes), ntypes, 5))
    first = np.cumsum([0] + nframes)
    # frames with the same atom count and periodicity share one neighbour spec (fixed from all of
    # them) and are processed together in equal chunks: one compilation per group
    keys = [(c.shape[1], b is not None) for c, b in zip(coords, boxes)]
    for key in dict.fromkeys(keys):
        members = [i for i, k in enumerate(keys) if k == key and nframes[i]]
        if not members:
            continue
        natoms, periodic = key
        coord = np.concatenate([coords[i] for i in members])
        box = np.concatenate([boxes[i] for i in members]) if periodic else None
        atype = np.concatenate([atypes[i] for i in members])
        where = np.concatenate([np.arange(first[i], first[i + 1]) for i in members])
        spec = allocate(coord, box, float(hyper.rcut), tuple(hyper.sel), method)
        nf = coord.shape[0]
        n = max(1, min(nf, max_pairs // (natoms * candidates_per_atom(spec))))
        if box is None:
            box = np.zeros((nf, 3, 3))
        for start in range(0, nf, n):
            stop = min(start + n, nf)
            c, b, t = coord[start:stop], box[start:stop], atype[start:stop]
            pad = n - (stop - start)
            if pad:  # repeat the last frame, then drop its sums: same shapes, no recompilation
                c, b, t = (np.concatenate([x, np.repeat(x[-1:], pad, axis=0)]) for x in (c, b, t))
            part, over = _chunk_sums_candidates(spec, float(hyper.rcut_smth), ntypes, periodic, c, b, t)
            if bool(over):  # some atom has more neighbours of a type than sel: the nearest sel count
                part = _chunk_sums(spec, float(hyper.rcut_smth), ntypes, periodic, c, b, t)
            sums[where[start:stop]] = np.asarray(part, np.float64)[: stop - start]
    sums[..., 0] *= nnei
    return sums if per_frame else sums.sum(axis=0)


def _std(s: float, q: float, n: float, protect: float) -> float:
    """StatItem.compute_std: sqrt(max(Q/N − (S/N)², 0)), at least ``protect``; 0.1 when N = 0."""
    if n == 0:
        return DEFAULT_STD
    val = float(np.sqrt(max(q / n - (s / n) * (s / n), 0.0)))
    return protect if abs(val) < protect else val


def stats_from_sums(
    sums: np.ndarray, nnei: int, protect: float = 0.01, set_davg_zero: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """davg, dstd (ntypes, nnei, 4) from :func:`env_mat_sums` output (EnvMatStatSe.__call__).

    set_davg_zero (``model.descriptor.set_davg_zero``): davg stays 0 everywhere, dstd is unchanged (still
    the spread around the data's mean), as DeePMD-kit's ``compute_input_stats`` keeps its zero mean and
    copies only the std in."""
    sums = np.asarray(sums, np.float64)
    ntypes = sums.shape[0]
    davg = np.zeros((ntypes, nnei, 4))
    dstd = np.zeros((ntypes, nnei, 4))
    for t in range(ntypes):
        nr, sr, qr, sa, qa = sums[t]
        davg[t, :, 0] = sr / nr if nr > 0 and not set_davg_zero else 0.0
        dstd[t, :, 0] = _std(sr, qr, nr, protect)
        dstd[t, :, 1:] = _std(sa, qa, 3.0 * nr, protect)
    return davg, dstd


def env_mat_stats(
    frames: Iterable[dict], hyper, protect: float = 0.01, method: str = "auto", set_davg_zero: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """DeePMD-kit's environment-matrix statistics (``EnvMatStatSe``) of ``frames``.

    Args:
      frames: iterable of batches, e.g. :func:`sample_stat_frames` output (see :func:`env_mat_sums`).
      hyper: a ``ModelHyper`` (rcut, rcut_smth, sel, ntypes).
      protect: ``data_stat_protect``, the floor of every std (1/Å).
      method: neighbour-list method, see :func:`env_mat_sums`.
      set_davg_zero: davg 0 everywhere, dstd unchanged (see :func:`stats_from_sums`).

    Returns:
      davg, dstd: (ntypes, nnei, 4) float64, 1/Å; davg[..., 1:] = 0; identical rows for every slot.
    """
    return stats_from_sums(env_mat_sums(frames, hyper, method=method), int(sum(hyper.sel)), protect, set_davg_zero)


# ----------------------------------------------------------------------------- energy bias
def energy_bias(frames: Iterable[dict], ntypes: int, rcond: float | None = None) -> np.ndarray:
    """Per-type energy bias (ntypes,) eV: least squares of frame energies on per-type atom counts.

    ``np.linalg.lstsq(counts, E, rcond)`` as DeePMD-kit's ``compute_stats_from_redu``: counts
    (nframes, ntypes) atoms of each type per frame (atype −1 = padding, not counted), E (nframes,) eV,
    pooled over all batches. Batches without energy labels (``find_energy`` 0 or no ``energy``) are
    skipped. A singular count matrix (one composition only, a type never present) gets lstsq's
    minimum-norm solution, as in DeePMD-kit; one type gives Σ nE / Σ n².

    Raises ValueError when no frame has an energy label.
    """
    counts, energies = [], []
    for batch in frames:
        e = batch.get("energy")
        if e is None or float(batch.get("find_energy", 1.0)) <= 0.0:
            continue
        e = np.asarray(e, np.float64).reshape(-1)
        atype = np.asarray(batch["atype"])
        atype = np.broadcast_to(atype, (e.shape[0], atype.shape[-1]))
        c = np.stack([(atype == t).sum(axis=-1) for t in range(ntypes)], axis=-1).astype(np.float64)
        counts.append(c)
        energies.append(e)
    if not counts:
        raise ValueError("energy bias: no sampled frame has an energy label")
    bias, *_ = np.linalg.lstsq(np.concatenate(counts), np.concatenate(energies), rcond=rcond)
    return np.asarray(bias, np.float64)
