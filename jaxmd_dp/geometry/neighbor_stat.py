"""Neighbour statistics of data sets (DeePMD-kit's ``dp neighbor-stat``): the most neighbours of each type
any atom has within ``rcut`` (``max_nbor_size``), the shortest interatomic distance (``min_nbor_dist``), per
system and overall, and the ``sel`` they suggest (:func:`suggest_sel`: max × factor, truncated to an integer and
rounded up to a multiple of 4, the trainer's ``sel: auto`` rule). The trainer's neighbour scan also sums the environment
matrices of the frames its statistics sample. The command: :mod:`jaxmd_dp.cli.neighbor_stat`.
"""

from __future__ import annotations

import concurrent.futures
import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry.neighbor import reduction_jit

CHUNK = 64  # frames per call of the compiled statistics function (at most)
MAX_PAIRS = 16_000_000  # centre × candidate pairs per call (memory bound for large systems)
SUM_ALL_FRAMES = 512  # with sum_frames: a group with at most this many other frames sums them all (one compile;
# summing a frame more costs far less than another compile of the scan)


@dataclass
class NeighborStats:
    """max_nbor_size: (ntypes,) most neighbours of each type any atom had within rcut;
    min_nbor_dist: shortest distance between two atoms (periodic images included), inf when no pair is
    within rcut; nframes, nsystems: what was looked at; type_map: names of the types."""

    rcut: float
    type_map: list[str]
    max_nbor_size: np.ndarray
    min_nbor_dist: float
    nframes: int
    nsystems: int
    min_dist_per_system: np.ndarray | None = None
    max_pairs_per_system: np.ndarray | None = None
    max_nbor_per_system: np.ndarray | None = None
    max_unique_pairs_per_system: np.ndarray | None = None  # max_pairs with each same-type pair counted once
    env_sums_per_system: list[np.ndarray] | None = None  # with rcut_smth: (nframes, ntypes, 5) per system
    max_nbor_any_per_system: np.ndarray | None = None  # (nsystems, 1) most neighbours of any type of one atom
    ranked_nbor_per_system: list[np.ndarray] | None = None  # per system (natoms,): entry r the most over its
    # frames of the (r + 1)-th largest count of neighbours of any type among a frame's atoms


def suggest_sel(max_nbor_size, factor: float = 1.1) -> list[int]:
    """The trainer's ``sel: auto:<factor>``: n × factor truncated to an integer, then rounded up to a multiple
    of 4, as DeePMD-kit's ``BaseUpdateSel`` (84 neighbours give 92); 4 for a type never seen (no empty section)."""
    return [4 * ((int(n * factor) + 3) // 4) if n else 4 for n in np.asarray(max_nbor_size).tolist()]


@reduction_jit(static_argnums=(0, 1))
def _frame_stats(spec, rcut_smth, coord, box, atype):
    """((nframes, ntypes + 1) most neighbours of each type of an atom, then of any type, (nframes,) min
    distance to the nearest neighbour, cell overflow, (nframes, ntypes) neighbour pairs of each type (and the
    same with each pair of same-type atoms counted once), with ``rcut_smth``
    (else None) the environment-matrix sums (nframes, ntypes, 5) of :func:`geometry.stats.candidate_sums`,
    and (nframes, natoms) each frame's counts of neighbours of any type per atom, largest first)
    of these frames; atype (nframes, natoms).

    Straight from the candidate pairs within rcut, frame by frame: counts and a minimum, no
    neighbour-list sort."""
    from jaxmd_dp.geometry import neighbor
    from jaxmd_dp.geometry.stats import candidate_sums

    nt = len(spec.sel)

    def reduce(c, t):
        dmin = jnp.sqrt(jnp.min(jnp.where(c.valid, c.r2, jnp.inf)))
        sums = None if rcut_smth is None else candidate_sums(c, t, nt, rcut_smth, spec.rcut)
        pairs = jnp.sum(c.nneigh[0], axis=0)  # (ntypes,)
        same = jnp.stack([jnp.sum(jnp.where(t[0] == k, c.nneigh[0][:, k], 0)) for k in range(nt)])
        counts = jnp.sum(c.nneigh[0], axis=-1)  # (natoms,) of any type
        most = jnp.concatenate([jnp.max(c.nneigh[0], axis=0), jnp.max(counts)[None]])
        return most, dmin, c.cell_overflow, jnp.stack([pairs, pairs - same // 2]), sums, -jnp.sort(-counts)

    nmax, dmin, overflow, pairs, sums, ranked = neighbor.reduce_candidates(spec, reduce, coord, box, atype)
    return nmax, dmin, jnp.any(overflow), pairs, sums, ranked


def neighbor_stat(
    systems,
    rcut: float,
    ntypes: int,
    one_type: bool = False,
    chunk: int = CHUNK,
    type_map: list[str] | None = None,
    method: str = "auto",
    rcut_smth: float | None = None,
    sum_frames: list | None = None,
) -> NeighborStats:
    """Neighbour statistics over every frame of ``systems`` (:class:`jaxmd_dp.data.system.System`).

    one_type: count every neighbour as one type (DeePMD-kit's ``--one-type``, for mixed-type models).
    Systems with the same atom count and periodicity share one neighbour spec (fixed from all their
    frames) and one compiled function, fed in equal chunks of frames: start-up on data sets of hundreds
    of small systems compiles a handful of times, not once per system. ``method``: neighbour-list
    method (see ``neighbor.allocate``). Per system: ``min_dist_per_system`` (nsystems,) its shortest
    distance; ``max_nbor_per_system`` and ``max_pairs_per_system`` (nsystems, ntypes) the most neighbours
    of each type of one atom, and of all atoms of one frame; ``max_nbor_any_per_system`` (nsystems, 1) the
    most neighbours of any type of one atom (a mixed-types sel); ``ranked_nbor_per_system`` per system
    (natoms,) the most over its frames of the (r + 1)-th largest count of neighbours of any type of an atom
    (the slots each rank of a frame's atoms fills, :func:`jaxmd_dp.model.plan.tier_sizes`);
    ``max_unique_pairs_per_system`` the most pairs of one frame with each pair of same-type atoms counted
    once (the slots :func:`jaxmd_dp.geometry.pair_partner.pair_partners` leaves to the nets, when no list is
    cut short by sel). With ``rcut_smth`` (Å, not with ``one_type``)
    and ``sum_frames`` (frame indices per system, for the first len(sum_frames) systems) also
    ``env_sums_per_system``: those frames' environment-matrix sums (nframes, ntypes, 5) per system, NaN for
    the other frames (all frames of an atom-count group are summed when at most :data:`SUM_ALL_FRAMES` are
    not asked for), from the same candidate pairs (the statistics' sums,
    :func:`jaxmd_dp.geometry.stats.scanned_sums`; one pass instead of two)."""
    from jaxmd_dp.geometry import neighbor

    if rcut <= 0:
        raise InputError(f"--rcut {rcut}: must be positive")
    nt = 1 if one_type else ntypes
    nmax_sys = np.zeros((len(systems), nt + 1), int)  # per type, then of any type
    dmin_sys = np.full(len(systems), math.inf)
    pairs_sys = np.zeros((len(systems), nt), int)
    unique_sys = np.zeros((len(systems), nt), int)
    if one_type or sum_frames is None:
        rcut_smth = None
    sums_sys = None if rcut_smth is None else [np.full((s.coord.shape[0], nt, 5), np.nan) for s in systems]
    want_sys = [np.zeros(s.coord.shape[0], bool) for s in systems]
    ranked_sys = [np.zeros(s.coord.shape[1], int) for s in systems]
    for k, idx in enumerate(sum_frames if rcut_smth is not None else ()):
        want_sys[k][idx] = True
    groups: dict = {}
    for k, s in enumerate(systems):
        atype = np.zeros_like(s.atype) if one_type else np.asarray(s.atype)
        if atype.size and atype.max() >= nt:
            raise InputError(f"{s.path}: atom type {int(atype.max())} is outside the type map of {nt} types")
        groups.setdefault((s.coord.shape[1], s.box is not None), []).append((k, s, atype))

    def scan_group(natoms: int, periodic: bool, members: list) -> None:
        """One atom-count group's frames, chunk by chunk (its systems' rows of the per-system arrays)."""
        coord = np.concatenate([s.coord for _, s, _ in members])
        box = np.concatenate([s.box for _, s, _ in members]) if periodic else None
        atype = np.concatenate([np.broadcast_to(t, (s.coord.shape[0], natoms)) for _, s, t in members])
        owner = np.concatenate([np.full(s.coord.shape[0], k) for k, s, _ in members])
        frame = np.concatenate([np.arange(s.coord.shape[0]) for _, s, _ in members])
        want = np.concatenate([want_sys[k] for k, _, _ in members])
        spec = neighbor.allocate(coord, box, rcut, (1,) * nt, method)
        size = max(1, min(chunk, coord.shape[0], MAX_PAIRS // max(1, natoms * neighbor.candidates_per_atom(spec))))
        if rcut_smth is not None and want.any() and np.count_nonzero(~want) <= SUM_ALL_FRAMES:
            want = np.ones_like(want)  # a few more frames summed cost less than compiling the plain scan too
        # the statistics' frames first, in chunks that also sum their environment matrices
        for rows, smth in ((np.flatnonzero(want), rcut_smth), (np.flatnonzero(~want), None)):
            n = len(rows)
            step = max(1, min(size, n))
            for a in range(0, n, step):
                r = rows[a : a + step]
                r = np.concatenate([r, np.repeat(r[:1], step - len(r))])  # one compiled shape: pad with a copy
                c, bx, t = coord[r], None if box is None else box[r], atype[r]
                m, d, overflow, pairs, sums, ranked = _frame_stats(spec, smth, c, bx, t)
                if bool(overflow):  # a cell fuller than allocated: recount these frames by brute force
                    brute = neighbor.allocate(c, bx, rcut, (1,) * nt, method="brute")
                    m, d, _, pairs, sums, ranked = _frame_stats(brute, smth, c, bx, t)
                real = min(step, n - a)  # frames of this chunk that are not padding
                r = r[:real]
                if sums is not None:
                    for o, f, row in zip(owner[r], frame[r], np.asarray(sums, np.float64)[:real]):
                        sums_sys[o][f] = row
                np.maximum.at(nmax_sys, owner[r], np.asarray(m)[:real])
                np.minimum.at(dmin_sys, owner[r], np.asarray(d)[:real])
                np.maximum.at(pairs_sys, owner[r], np.asarray(pairs)[:real, 0])
                np.maximum.at(unique_sys, owner[r], np.asarray(pairs)[:real, 1])
                for o, row in zip(owner[r], np.asarray(ranked)[:real]):
                    np.maximum(ranked_sys[o], row, out=ranked_sys[o])

    # groups on two threads: one group's compile (XLA's, mostly on one core) and host work between chunks
    # beside another's scan (Cu's ASC22 input: 3 groups, 15,309 frames)
    with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="neighbor-scan") as pool:
        for f in [pool.submit(scan_group, *key, members) for key, members in groups.items()]:
            f.result()
    names = ["all"] if one_type else list(type_map or [f"type_{k}" for k in range(ntypes)])
    return NeighborStats(
        float(rcut),
        names,
        nmax_sys[:, :nt].max(axis=0, initial=0),
        float(dmin_sys.min(initial=math.inf)),
        int(sum(s.coord.shape[0] for s in systems)),
        len(systems),
        dmin_sys,
        pairs_sys,
        nmax_sys[:, :nt],
        unique_sys,
        sums_sys,
        nmax_sys[:, nt:],
        ranked_sys,
    )
