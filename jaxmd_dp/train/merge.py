"""Merged batches: one compiled training step for every batch shape of a data set.

A DeePMD-kit batch holds ``batch_size`` frames of one system, so data whose systems differ in atom count
give one batch shape (nframes, natoms) per group of systems: Cu's ASC22 data has four (32 × 1, 3 × 12,
2 × 16 and 1 × 32 atoms), Al-Cu-Mg's four as well. XLA compiles the training step and the evaluation step
for each shape, and on the CPU those compiles are most of a cold start (docs/performance.md).

A merged batch lays the frames' atoms end to end, padded to one of a few sizes ``atoms``
(:func:`bucket_sizes`): batches of 2 × 16 and 1 × 32 atoms share the size 32 at no cost, and a smaller
size is padded to a larger one where the padding over the whole run costs less than the compile it saves.
``frames`` is the largest batch size of the systems merged to that size. The model then sees one
frame of ``atoms`` atoms (its neighbour indices point into the merged list, each within its own frame),
and each atom carries the index of its frame, so energies and virials are summed back per frame and
each frame keeps its own box (:func:`jaxmd_dp.model.energy.predict_merged`). Padding atoms have type −1
and no neighbours, padding frames no atoms: they add nothing to the predictions, and the loss averages
over the batch's real frames and atoms only (``nframes``, ``natoms``). Same numbers as the per-shape
step up to the order of sums; one compile per merged size instead of one per shape.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.train.step import FIND_KEYS, FRAME_KEYS, NL_KEYS

COST_BUDGET = 0.02  # padding may always add this much to the expected atoms per step (and to its time)
COMPILE_ATOM_STEPS = 5000  # one more compiled step costs about the time of this many atom-steps of training
# (a compile's time over the step's time per atom: fewer atom-steps where an atom costs more, as with
# Al-Cu-Mg's large sel or in float64, more for water's)


def bucket_sizes(
    sizes: Sequence[int], probs: Sequence[float], calls: int | None = None, budget: float = COST_BUDGET
) -> list[int]:
    """The merged sizes (atoms) for batches of ``sizes`` atoms drawn with probabilities ``probs`` (per
    system), for a run of ``calls`` steps. From the largest size down, a size joins the current merged
    size while the padding of the sizes it holds, Σ p · (merged size − size) atoms per step, stays
    within ``budget`` × the expected atoms per step, or within :data:`COMPILE_ATOM_STEPS` over the
    ``calls`` steps (a short run pads everything to one size; a long one keeps its sizes apart); else it
    starts a merged size of its own. A batch goes to the smallest merged size that holds it. Ascending."""
    sizes, probs = np.asarray(sizes, int), np.asarray(probs, float) / np.sum(probs)
    base = float(np.sum(probs * sizes))
    allowed = max(budget * base, COMPILE_ATOM_STEPS / calls if calls else 0.0)
    buckets, extra = [], 0.0
    for size in sorted(set(sizes.tolist()), reverse=True):
        p = float(probs[sizes == size].sum())
        if buckets and extra + p * (buckets[-1] - size) <= allowed:
            extra += p * (buckets[-1] - size)
        else:
            buckets.append(size)
            extra = 0.0
    return sorted(buckets)


class MergedShape(NamedTuple):
    """Static size of a merged batch: ``atoms`` atom rows, ``frames`` frame rows (both padded)."""

    atoms: int
    frames: int


def merged_capacity(atypes: Sequence[np.ndarray], batch_sizes: Sequence[int], ntypes: int) -> tuple[int, ...]:
    """Most atoms of each type in any merged batch: per system, batch size × its count of the type
    (``atypes``: each system's (natoms,) types). The per-type nets run on this many rows."""
    cap = np.zeros(ntypes, int)
    for a, b in zip(atypes, batch_sizes):
        cap = np.maximum(cap, int(b) * np.bincount(np.asarray(a)[np.asarray(a) >= 0], minlength=ntypes)[:ntypes])
    return tuple(int(c) for c in cap)


def merge_batch(batch: dict, shape: MergedShape) -> dict:
    """A sampler batch with its neighbour lists (keys :data:`~jaxmd_dp.train.step.NL_KEYS`, host or
    device arrays) → the merged batch the step takes, on the device (:func:`merge_arrays`), with the
    batch's find_* flags."""
    arrays = {k: batch[k] for k in FRAME_KEYS + NL_KEYS if k in batch}
    out = _merger(shape)(arrays)
    out.update({k: batch[k] for k in FIND_KEYS})
    return out


def merge_arrays(b: dict, shape: MergedShape) -> dict:
    """A batch's arrays → the merged arrays the step takes (traceable; the body of a jitted merge):

    b: coord, force (nb, n, 3); atype (n,) or (nb, n) int; box (nb, 3, 3) Å; energy (nb,) eV; virial
    (nb, 9) eV; nl_idx (nb, n, nnei) int; nl_shift (nb, n, nnei, 3) int; nl_nmax (nb, ntypes); optional
    nl_pair (nb, n, nnei) int, flat slots of the reverse pairs (``geometry.pair_partner``).
    Returns coord, force (1, atoms, 3); atype (1, atoms) int, −1 for padding; frame (1, atoms) int, each
    atom's frame; box (frames, 3, 3) Å; energy (frames,) eV; virial (frames, 9) eV; nframes, natoms ()
    the batch's real frames and atoms per frame; nl_idx (1, atoms, nnei) int32 into the merged atoms, −1
    empty; nl_shift (1, atoms, nnei, 3) int16 cell vectors of the atom's own frame; nl_nmax (1, ntypes);
    nl_pair (1, atoms, nnei) int32 flat slots of the merged list, −1 none (when given)."""
    nb, n = b["coord"].shape[:2]
    pad_atoms, pad_frames = shape.atoms - nb * n, shape.frames - nb
    if pad_atoms < 0 or pad_frames < 0:
        raise ValueError(f"a batch of {nb} × {n} atoms does not fit the merged shape {shape}")

    def atoms(x, fill=0):  # (nb, n, ...) → (1, atoms, ...)
        x = x.reshape((nb * n,) + x.shape[2:])
        return jnp.pad(x, [(0, pad_atoms)] + [(0, 0)] * (x.ndim - 1), constant_values=fill)[None]

    def frames(x):  # (nb, ...) → (frames, ...)
        return jnp.pad(x, [(0, pad_frames)] + [(0, 0)] * (x.ndim - 1))

    idx = b["nl_idx"].astype(jnp.int32)
    idx = jnp.where(idx >= 0, idx + n * jnp.arange(nb, dtype=jnp.int32)[:, None, None], -1)
    out = (
        {}
        if "nl_pair" not in b
        else {
            "nl_pair": atoms(
                jnp.where(
                    b["nl_pair"] >= 0,
                    b["nl_pair"] + n * idx.shape[-1] * jnp.arange(nb, dtype=jnp.int32)[:, None, None],
                    -1,
                ),
                -1,
            )
        }
    )
    return out | {
        "coord": atoms(b["coord"]),
        "force": atoms(b["force"]),
        "atype": atoms(jnp.broadcast_to(b["atype"], (nb, n)), -1),
        "frame": atoms(jnp.broadcast_to(jnp.arange(nb, dtype=jnp.int32)[:, None], (nb, n))),
        "box": frames(b["box"]),
        "energy": frames(b["energy"]),
        "virial": frames(b["virial"]),
        "nframes": jnp.asarray(nb, b["energy"].dtype),
        "natoms": jnp.asarray(n, b["energy"].dtype),
        "nl_idx": atoms(idx, -1),
        "nl_shift": atoms(b["nl_shift"].astype(jnp.int16)),
        "nl_nmax": jnp.max(b["nl_nmax"], axis=0, keepdims=True),
    }


@functools.lru_cache(maxsize=16)
def _merger(shape: MergedShape):
    """Jitted merge into ``shape`` (compiled once per input batch shape: a few gathers and pads)."""
    return jax.jit(functools.partial(inline_trace(merge_arrays), shape=shape))
