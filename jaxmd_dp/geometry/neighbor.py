"""Neighbour lists with DeePMD-kit's fixed ``sel`` slots per neighbour type.

The pattern is jax-md's: ``allocate`` runs on the host with numpy, looks at the data and fixes every
shape (image range, cell grid, cell capacity) in a hashable :class:`NeighborSpec`; ``build`` is a pure
jnp function of that spec and the coordinates, usable inside ``jit``.

A neighbour list stores, for every centre atom and every slot, the neighbour's index ``idx`` (−1 for an
empty slot) and the integer periodic image ``shift`` (in units of the cell vectors), so that the pair
vector is ``coord[j] − coord[i] + shift @ box`` — differentiable in ``coord`` and ``box``.
Slots are grouped by neighbour type (``sel[0]`` slots for type 0, then ``sel[1]`` for type 1, ...);
inside a group neighbours are sorted by distance, the nearest first, and the farthest are dropped when
a type has more than ``sel[t]`` neighbours (``nneigh`` tells how many it had), as DeePMD-kit does.
A list of one section (``sel`` of one entry) holds the nearest neighbours of every type: DeePMD-kit's
"mixed types" list (se_atten's ``sel`` as one number), the same list as the one type's for one type.

Three methods give the same neighbours (the same lists with ``order="nearest"``):
- ``"brute"``: every atom against every atom in every needed image; O(N²), the reference.
- ``"cell"``: a cell list in fractional coordinates, each atom against the atoms of the cells within
  reach; O(N). Boxes smaller than 2·rcut (several images of one atom in reach) are handled by all three.
- ``"minimage"``: every atom against every atom of a supercell of k1 × k2 × k3 boxes wider than 2·rcut,
  each once, in its nearest image (the rounded fractional difference): no other image can then be
  within rcut. O(N²); for boxes wider than 2·rcut (k = 1) one candidate per atom pair: water's 192 atoms
  in a 12.4 Å box with rcut 6 Å examine 192 per atom, against ~1,160 for the cell list. Small boxes
  (Cu's 32 atoms in 7.2 Å with rcut 8 Å: k = 3) examine k1·k2·k3·N, against (2·reach + 1)³·N (less the
  images beyond rcut) by brute force: 864 against 2,592.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.running_count import running_count
from jaxmd_dp.runtime.compile_options import backend_options
from pallas_kernels import dispatch


class NeighborSpec(NamedTuple):
    """Static (hashable) description of a neighbour-list computation; see :func:`allocate`."""

    rcut: float
    sel: tuple[int, ...]
    pbc: bool
    method: str  # "brute" | "cell" | "minimage"
    reach: tuple[int, int, int]  # image/cell offsets searched per cell vector: −reach..reach ((0, 0, 0) for
    # "minimage": each pair's image comes from its fractional difference)
    ncell: tuple[int, int, int]  # cells per cell vector ((1, 1, 1) for "brute"; boxes per supercell vector
    # for "minimage")
    capacity: int  # atoms per cell ("cell"), natoms ("brute", "minimage")
    skip: tuple = ()  # offsets (3-tuples) of the reach cube not searched: their cells lie beyond rcut in every
    # frame the spec serves (:func:`search_offsets`)


class NeighborList(NamedTuple):
    """A built neighbour list.

    idx: (nframes, natoms, nnei) int32, neighbour index or −1 for an empty slot.
    shift: (nframes, natoms, nnei, 3) periodic image of the neighbour, in cell vectors (float, integral).
    nneigh: (nframes, natoms, len(sel)) int32, neighbours of each section's type within rcut (before
      truncation to sel; of any type in a list of one section).
    cell_overflow: () bool, True when a cell held more atoms than the spec's capacity (re-``allocate``).
    """

    idx: jax.Array
    shift: jax.Array
    nneigh: jax.Array
    cell_overflow: jax.Array


def _perp_widths(box: np.ndarray) -> np.ndarray:
    """Distances between opposite faces of each cell: (nframes, 3) Å, from box (nframes, 3, 3).

    Face k's normal is the cross product of the other two cell vectors (written out: ``np.cross``'s
    per-call overhead dwarfs these few products, and the training loop checks every batch's box)."""
    u, v = box[:, [1, 2, 0]], box[:, [2, 0, 1]]
    normals = u[..., [1, 2, 0]] * v[..., [2, 0, 1]] - u[..., [2, 0, 1]] * v[..., [1, 2, 0]]
    vol = np.abs(np.sum(box[:, 0] * normals[:, 0], axis=-1))
    return vol[:, None] / np.sqrt(np.sum(normals * normals, axis=-1))


def allocate(
    coord: np.ndarray,
    box: np.ndarray | None,
    rcut: float,
    sel: tuple[int, ...] | list[int],
    method: str = "auto",
    capacity_factor: float = 1.3,
) -> NeighborSpec:
    """Fix the shapes of a neighbour-list computation from example frames (host side, numpy).

    Args:
      coord: (nframes, natoms, 3) Å, the frames the spec must serve.
      box: (nframes, 3, 3) Å, rows are cell vectors; None for a non-periodic system.
      rcut: cut-off radius, Å.
      sel: maximum neighbours kept per neighbour type.
      method: "brute", "cell", "minimage", or "auto": of those that apply, the one with the fewest
        candidates per atom (the cell list only with 8 cells or more; no minimum image where the Pallas
        kernels build the lists, see ``pallas_kernels.dispatch``).
      capacity_factor: head-room on the fullest cell seen, for frames not in ``coord``.
    """
    coord = np.asarray(coord, dtype=np.float64).reshape(-1, np.shape(coord)[-2], 3)
    natoms = coord.shape[1]
    sel = tuple(int(s) for s in sel)
    if box is None:
        return NeighborSpec(float(rcut), sel, False, "brute", (0, 0, 0), (1, 1, 1), natoms)
    box = np.asarray(box, dtype=np.float64).reshape(-1, 3, 3)
    widths = _perp_widths(box).min(axis=0)  # (3,)
    brute_reach = tuple(int(math.ceil(rcut / w)) for w in widths)
    ncell = tuple(max(1, int(w // rcut)) for w in widths)
    cell_reach = tuple(int(math.ceil(rcut * n / w)) for n, w in zip(ncell, widths))
    if method == "auto":
        options = ["brute"] + (["cell"] if np.prod(ncell) >= 8 else [])
        # the Pallas kernel has no minimum-image search (it would search by brute force)
        options += [] if dispatch.use_pallas() else ["minimage"]
        specs = [allocate(coord, box, rcut, sel, m, capacity_factor) for m in options]
        return min(specs, key=candidates_per_atom)  # on a tie the first: brute, cell, minimage
    if method == "minimage":  # the fewest boxes per supercell vector that make it wider than 2·rcut
        rep = tuple(int(math.floor(2 * rcut * (1 + 1e-9) / w)) + 1 for w in widths)
        return NeighborSpec(float(rcut), sel, True, "minimage", (0, 0, 0), rep, natoms)
    if method == "brute":
        return NeighborSpec(
            float(rcut),
            sel,
            True,
            "brute",
            brute_reach,
            (1, 1, 1),
            natoms,
            _beyond_rcut(brute_reach, rcut, box, (1, 1, 1)),
        )
    if method != "cell":
        raise ValueError(f"unknown neighbour-list method {method!r}")
    cid = _cell_index_np(coord, box, ncell)
    fullest = max(np.bincount(c, minlength=int(np.prod(ncell))).max() for c in cid)
    capacity = min(natoms, int(math.ceil(fullest * capacity_factor)) + 1)
    return NeighborSpec(
        float(rcut), sel, True, "cell", cell_reach, ncell, capacity, _beyond_rcut(cell_reach, rcut, box, ncell)
    )


def _min_image_ok(widths: np.ndarray, rcut: float) -> bool:
    """Is every neighbour within ``rcut`` its partner's nearest image in a (super)cell of these
    perpendicular widths (Å)? True when every width exceeds 2·rcut: a pair vector shorter than rcut then
    has fractional components inside (−½, ½), which rounding the fractional difference finds. With a
    relative margin for rounding."""
    return bool(np.all(np.asarray(widths) > 2 * rcut * (1 + 1e-9)))


def holds_atoms_once(spec: NeighborSpec) -> bool:
    """Whether no list built with ``spec`` can hold one atom twice (two images of a neighbour within rcut):
    without periodic boundaries, or with the minimum image in single boxes (``ncell`` (1, 1, 1): every cell
    the spec serves is wider than 2·rcut, :func:`fits`, so two images of an atom lie over 2·rcut apart).
    Other specs may still build such lists (a cell list over wide boxes): False says only "not known"."""
    return not spec.pbc or (spec.method == "minimage" and spec.ncell == (1, 1, 1))


def fits(spec: NeighborSpec, box: np.ndarray | None) -> bool:
    """Does ``spec`` search far enough (images/cells) for these boxes? (nframes, 3, 3) Å or None.

    Cell capacity is checked at run time instead (``NeighborList.cell_overflow``)."""
    if box is None or not spec.pbc:
        return box is None and not spec.pbc
    box = np.asarray(box, np.float64).reshape(-1, 3, 3)
    widths = _perp_widths(box).min(axis=0)
    if spec.method == "minimage":
        return _min_image_ok(widths * np.asarray(spec.ncell), spec.rcut)
    need = [math.ceil(spec.rcut * n / w) for n, w in zip(spec.ncell, widths)]
    return all(n <= r for n, r in zip(need, spec.reach)) and (
        not spec.skip or bool(np.all(_gap2(np.asarray(spec.skip), box, spec.ncell) >= _far2(spec.rcut)))
    )


def _cell_index_np(coord, box, ncell):
    frac = np.einsum("fni,fij->fnj", coord, np.linalg.inv(box))
    frac = frac - np.floor(frac)
    c = np.minimum((frac * np.array(ncell)).astype(np.int64), np.array(ncell) - 1)
    return (c[..., 0] * ncell[1] + c[..., 1]) * ncell[2] + c[..., 2]


def _cell_metric(box: np.ndarray, ncell) -> tuple[float, ...]:
    """(ℓ0, ℓ1, ℓ2, λ, σ) of the search cell (each box row divided by its cell count), each the least over
    the frames of ``box`` (nframes, 3, 3): ℓk the length (Å) of cell vector k, λ the smallest eigenvalue of
    the matrix of cosines between the cell vectors (1 for a rectangular cell), σ the cell's smallest
    singular value (Å). For every row vector x and every frame, |x · cell|² ≥ λ Σk (xk ℓk)² and
    |x · cell| ≥ σ |x| (the first is the sharper for long rectangular cells, the second for sheared ones)."""
    cells = np.asarray(box, np.float64) / np.asarray(ncell, np.float64)[None, :, None]
    length = np.sqrt(np.sum(cells * cells, axis=-1))  # (nframes, 3)
    unit = cells / length[..., None]
    lam = np.linalg.eigvalsh(unit @ np.swapaxes(unit, -1, -2))[:, 0]
    sigma = np.linalg.svd(cells, compute_uv=False)[:, -1]
    return (*(float(x) for x in length.min(axis=0)), float(lam.min()), float(sigma.min()))


def _offsets(reach) -> np.ndarray:
    """All integer offsets in [−reach, reach]³: (noff, 3)."""
    r = [np.arange(-k, k + 1) for k in reach]
    return np.stack(np.meshgrid(*r, indexing="ij"), axis=-1).reshape(-1, 3)


def _beyond_rcut(reach, rcut: float, box: np.ndarray, ncell) -> tuple:
    """The offsets n of the reach cube whose cells hold no neighbour within ``rcut`` of a centre in the
    home cell, in every frame of ``box`` (nframes, 3, 3): a sorted tuple of 3-tuples.

    A candidate in offset n lies (n + a) · cell from its centre, a ∈ (−1, 1)³ (the fractional positions of
    both atoms in their cells), hence at least max(sqrt(λ Σk (gk ℓk)²), σ |g|) away, gk = max(|nk| − 1, 0)
    and (ℓ0, ℓ1, ℓ2, λ, σ) from :func:`_cell_metric`. With small boxes this drops the corners and edges of
    the image cube: Cu's 32 atoms in a 7.2 Å cube with rcut 8 Å search 81 of the 125 images in reach."""
    offs = _offsets(reach)
    return tuple(tuple(int(x) for x in n) for n in offs[_gap2(offs, box, ncell) >= _far2(rcut)])


def _gap2(offs: np.ndarray, box: np.ndarray, ncell) -> np.ndarray:
    """(noff,) lower bound on the squared distance (Å²) from a centre in the home cell to any atom in the
    cells at ``offs`` (noff, 3), in every frame of ``box``: see :func:`_beyond_rcut`."""
    *length, lam, sigma = _cell_metric(box, ncell)
    g = np.maximum(np.abs(offs) - 1, 0)
    return np.maximum(lam * np.sum((g * np.asarray(length)) ** 2, axis=-1), sigma**2 * np.sum(g * g, axis=-1))


def _far2(rcut: float) -> float:
    """Squared distance from which an offset is skipped: rcut² with a relative margin for rounding."""
    return (rcut * (1 + 1e-9)) ** 2


def search_offsets(spec: NeighborSpec) -> np.ndarray:
    """The image (brute) or cell offsets the builders search: (noff, 3) int, the reach cube [−reach,
    reach]³ less ``spec.skip`` (offsets beyond rcut, :func:`_beyond_rcut`); for "minimage" the boxes of
    the supercell, [0, k1) × [0, k2) × [0, k3)."""
    if spec.method == "minimage":
        return np.stack(np.meshgrid(*[np.arange(k) for k in spec.ncell], indexing="ij"), axis=-1).reshape(-1, 3)
    offs = _offsets(spec.reach)
    if not spec.skip:
        return offs
    skip = set(spec.skip)
    return offs[[tuple(int(x) for x in n) not in skip for n in offs]]


def candidates_per_atom(spec: NeighborSpec) -> int:
    """Candidate neighbours examined per centre atom: searched offsets × atoms per offset (the
    candidate blocks' noff × m). Callers size their chunks of frames by it."""
    return len(search_offsets(spec)) * spec.capacity


def _of_section(spec: NeighborSpec, valid, cand_type, t: int):
    """The candidates of section t: those of type t, or every one in a list of one section (mixed types)."""
    return valid if len(spec.sel) == 1 else valid & (cand_type == t)


def _counts(spec: NeighborSpec, cand_type, valid):
    """Neighbours of each section's type (of any type in a list of one section) within rcut: (natoms,
    nsections) int32, from candidate blocks (natoms, noff, m).

    Summed as float32 ones (exact below 2**24): XLA CPU vectorises float reductions, not integer ones."""
    return jnp.stack(
        [
            jnp.where(_of_section(spec, valid, cand_type, t), 1.0, 0.0).astype(jnp.float32).sum(axis=(-2, -1))
            for t in range(len(spec.sel))
        ],
        axis=-1,
    ).astype(jnp.int32)


def _shifts(spec: NeighborSpec, pos, idx, img, wrap, m: int):
    """Periodic images of selected candidates: (natoms, k, 3) from their flat candidate positions pos
    (natoms, k) (offset · m + candidate), neighbour indices idx (natoms, k) (−1: empty slot, shift 0),
    the searched offsets' images img (natoms, noff, 3) and the atoms' wraps (natoms, 3). For "minimage"
    img is the atoms' wrapped fractional coordinates (natoms, 3), and each pair's image is recomputed from
    them and the candidate's box in the supercell as its builder rounded it."""
    p = jnp.maximum(pos, 0)
    j = jnp.maximum(idx, 0)
    if spec.method == "minimage":
        box_in_super = jnp.asarray(search_offsets(spec), img.dtype)[p // m]  # (natoms, k, 3)
        k = jnp.asarray(spec.ncell, img.dtype)
        image = box_in_super - k * jnp.round(((img[j] + box_in_super) - img[:, None, :]) / k)
    else:
        image = jnp.take_along_axis(img, (p // m)[..., None], axis=1)
    shift = image + wrap[:, None, :] - wrap[j]
    return jnp.where((idx >= 0)[..., None], shift, 0.0)


def _select_nearest(spec: NeighborSpec, r2, cand_idx, cand_type, valid, img, wrap, m):
    """Keep the nearest ``sel[t]`` candidates of each type, nearest first (DeePMD-kit's order).

    r2: (natoms, ncand) squared distances; cand_idx (natoms, ncand) int; cand_type (natoms, ncand) int;
    valid (natoms, ncand) bool; img, wrap, m: see :func:`_shifts`. Returns idx (natoms, nnei), shift.
    """
    idx_out, pos_out = [], []
    for t, nsel in enumerate(spec.sel):
        ok = _of_section(spec, valid, cand_type, t)
        key = jnp.where(ok, r2, jnp.inf)
        k = min(nsel, key.shape[-1])
        neg, pos = jax.lax.top_k(-key, k)
        found = jnp.isfinite(neg)
        idx_t = jnp.where(found, jnp.take_along_axis(cand_idx, pos, axis=-1), -1)
        if k < nsel:  # fewer candidates than slots: pad with empty slots
            idx_t = jnp.pad(idx_t, ((0, 0), (0, nsel - k)), constant_values=-1)
            pos = jnp.pad(pos, ((0, 0), (0, nsel - k)))
        idx_out.append(idx_t)
        pos_out.append(pos)
    idx = jnp.concatenate(idx_out, axis=-1).astype(jnp.int32)
    return idx, _shifts(spec, jnp.concatenate(pos_out, axis=-1), idx, img, wrap, m)


def _select_any(spec: NeighborSpec, r2, cand_idx, cand_type, valid, img, wrap, m):
    """The candidates of each type in candidate order (no sort): valid only when no type has more than
    ``sel[t]`` neighbours. Same arguments and results as :func:`_select_nearest`; O(ncand).

    Each candidate's slot is its rank among the row's earlier candidates of its type: a running count
    per type (:func:`~jaxmd_dp.geometry.running_count.running_count`, small matmuls instead of a
    cumulative sum), and the slots of all types are filled by one scatter."""
    natoms, ncand = r2.shape
    rows = jnp.broadcast_to(jnp.arange(natoms)[:, None], (natoms, ncand))
    where = jnp.broadcast_to(jnp.arange(ncand, dtype=jnp.int32), (natoms, ncand))
    first = np.concatenate([[0], np.cumsum(spec.sel)]).astype(int)
    ok = [_of_section(spec, valid, cand_type, t) for t in range(len(spec.sel))]
    rank = running_count(jnp.stack(ok)) - 1  # (ntypes, natoms, ncand)
    col = jnp.full((natoms, ncand), first[-1], jnp.int32)  # column nnei collects the rest, then is dropped
    for t, nsel in enumerate(spec.sel):
        col = jnp.where(ok[t] & (rank[t] < nsel), int(first[t]) + rank[t], col)
    pos = jnp.full((natoms, int(first[-1]) + 1), -1, jnp.int32).at[rows, col].set(where)[:, :-1]
    idx = jnp.where(pos >= 0, jnp.take_along_axis(cand_idx.astype(jnp.int32), jnp.maximum(pos, 0), axis=-1), -1)
    return idx, _shifts(spec, pos, idx, img, wrap, m)


# The builders return candidate blocks (natoms, noff, m): for each centre atom, each searched image or cell
# offset and m candidate atoms (every atom for "brute", a cell's capacity for "cell"). Everything is
# built by broadcasting one Cartesian component at a time from small per-atom/per-offset rows, and the
# masks are applied in this 3-d shape: XLA CPU then runs the distance loops vectorised. Flattening the
# candidates first (or working on (..., 3) arrays, or gathering per candidate pair) made them far slower.
# Consumers that need one candidate axis (the selections) flatten with a free reshape. The candidates'
# periodic shifts are not built as a block: the selections compute them for the kept slots only.


def _every_atom_blocks(spec: NeighborSpec, r2, offs_np: np.ndarray, atype):
    """(candidate index, candidate type, valid), each (natoms, noff, natoms), of searches that pair every
    atom with every atom at each offset ("brute", "minimage"): r2 (natoms, noff, natoms) squared
    distances, offs_np (noff, 3) the static offsets (the centre itself is excluded at offset 0)."""
    natoms = r2.shape[0]
    shape = r2.shape
    cand_j = jnp.broadcast_to(jnp.arange(natoms, dtype=jnp.int32), shape)
    home = np.all(offs_np == 0, axis=-1)  # (noff,) static
    is_self = jnp.asarray(np.eye(natoms, dtype=bool)[:, None, :] & home[None, :, None])
    cand_type = jnp.broadcast_to(atype[None, None, :], shape)
    valid = (r2 < spec.rcut**2) & ~is_self & (cand_type >= 0) & (atype >= 0)[:, None, None]
    return cand_j, cand_type, valid


def inverse_box(box: jax.Array) -> jax.Array:
    """The inverse of cells ``box`` (..., 3, 3) Å (rows are cell vectors), 1/Å, from their cross products
    (the adjugate over the determinant): exact to rounding like LU, and a few element-wise ops, where
    ``jnp.linalg.inv`` lowers on the CPU to LAPACK calls whose first lowering imports scipy and whose code
    lengthens the compile of every program that holds it (neighbour scans, list stores)."""
    a, b, c = box[..., 0, :], box[..., 1, :], box[..., 2, :]
    bc, ca, ab = jnp.cross(b, c), jnp.cross(c, a), jnp.cross(a, b)
    det = jnp.sum(a * bc, axis=-1)
    return jnp.stack([bc, ca, ab], axis=-1) / det[..., None, None]


def _build_brute(spec: NeighborSpec, coord, box, atype):
    natoms = coord.shape[0]
    if spec.pbc:
        frac = coord @ inverse_box(box)
        wrap = jnp.floor(frac)  # coord = (frac_wrapped + wrap) @ box
        cw = (frac - wrap) @ box
        offs_np = search_offsets(spec)
        offs = jnp.asarray(offs_np, dtype=coord.dtype)  # (noff, 3)
        vec = offs @ box  # (noff, 3) Cartesian image vectors
    else:
        wrap = jnp.zeros_like(coord)
        cw = coord
        offs_np = np.zeros((1, 3), np.int64)
        offs = vec = jnp.zeros((1, 3), dtype=coord.dtype)
    noff = offs_np.shape[0]
    d = [
        (vec[:, k][None, :, None] + cw[:, k][None, None, :]) - cw[:, k][:, None, None] for k in range(3)
    ]  # pair vector components, (natoms, noff, natoms) each
    r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    cand_j, cand_type, valid = _every_atom_blocks(spec, r2, offs_np, atype)
    img = jnp.broadcast_to(offs[None], (natoms, noff, 3))
    return (r2, cand_j, cand_type, valid, img, wrap), jnp.asarray(False), tuple(d)


def _build_minimage(spec: NeighborSpec, coord, box, atype):
    """Every atom against every atom of each box of the supercell, in its nearest supercell image: blocks
    (natoms, nbox, natoms). The image is the rounded fractional difference in supercell units; the
    selections recompute it for the kept slots (:func:`_shifts`)."""
    frac = coord @ inverse_box(box)
    wrap = jnp.floor(frac)
    fw = frac - wrap  # (natoms, 3) in [0, 1)
    boxes_np = search_offsets(spec)  # (nbox, 3) the boxes of the supercell
    boxes = jnp.asarray(boxes_np, coord.dtype)
    k = [float(x) for x in spec.ncell]
    # fractional pair vectors in supercell units, partner (in supercell box b) minus centre: (natoms, nbox, natoms)
    u = [((fw[:, c][None, None, :] + boxes[:, c][None, :, None]) - fw[:, c][:, None, None]) / k[c] for c in range(3)]
    u = [x - jnp.round(x) for x in u]
    d = [u[0] * (k[0] * box[0, c]) + u[1] * (k[1] * box[1, c]) + u[2] * (k[2] * box[2, c]) for c in range(3)]
    r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    cand_j, cand_type, valid = _every_atom_blocks(spec, r2, boxes_np, atype)
    return (r2, cand_j, cand_type, valid, fw, wrap), jnp.asarray(False), tuple(d)


def _build_cell(spec: NeighborSpec, coord, box, atype):
    natoms = coord.shape[0]
    ncell = jnp.asarray(spec.ncell)
    ncells = int(np.prod(spec.ncell))
    frac = coord @ inverse_box(box)
    wrap = jnp.floor(frac)
    fw = frac - wrap
    cw = fw @ box
    c3 = jnp.minimum((fw * ncell).astype(jnp.int32), ncell - 1)  # (natoms, 3)
    cid = (c3[:, 0] * spec.ncell[1] + c3[:, 1]) * spec.ncell[2] + c3[:, 2]
    cid = jnp.where(atype >= 0, cid, ncells)  # padding atoms go to a dummy cell
    order = jnp.argsort(cid, stable=True)
    counts = jnp.zeros(ncells + 1, jnp.int32).at[cid].add(1)
    start = jnp.cumsum(counts) - counts
    slot = jnp.arange(natoms) - start[cid[order]]  # position of each sorted atom within its cell
    overflow = jnp.any(counts[:ncells] > spec.capacity)
    table = jnp.full((ncells + 1, spec.capacity), -1, jnp.int32)
    table = table.at[cid[order], slot].set(order.astype(jnp.int32), mode="drop")[:ncells]
    # per-cell tables (one per Cartesian component): a candidate block is then one table row per
    # (atom, offset), a contiguous copy, not a gather per candidate pair
    exists_tab = table >= 0
    t0 = jnp.maximum(table, 0)
    cw_tab = [cw[:, k][t0] for k in range(3)]  # (ncells, cap) each
    type_tab = jnp.where(exists_tab, atype[t0], -1)
    offs = jnp.asarray(search_offsets(spec), dtype=jnp.int32)  # (noff, 3)
    tgt = c3[:, None, :] + offs[None, :, :]  # (natoms, noff, 3) unwrapped target cells
    img = jnp.floor_divide(tgt, ncell)  # periodic image of the target cell
    tw = tgt - img * ncell
    tid = (tw[..., 0] * spec.ncell[1] + tw[..., 1]) * spec.ncell[2] + tw[..., 2]  # (natoms, noff)
    img = img.astype(coord.dtype)
    vec = img @ box  # (natoms, noff, 3) Cartesian image vectors
    j = t0[tid]  # (natoms, noff, cap)
    d = [cw_tab[k][tid] + (vec[:, :, k] - cw[:, None, k])[:, :, None] for k in range(3)]  # (natoms, noff, cap)
    r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    home = jnp.all(img == 0, axis=-1)[:, :, None]  # (natoms, noff, 1)
    is_self = (j == jnp.arange(natoms)[:, None, None]) & home
    valid = exists_tab[tid] & (r2 < spec.rcut**2) & ~is_self & (atype >= 0)[:, None, None]
    return (r2, j, type_tab[tid], valid, img, wrap), overflow, tuple(d)


def _flat(cands):
    """Candidate blocks (natoms, noff, m) -> one candidate axis (natoms, noff · m), followed by the
    blocks' img, wrap and m (the arguments of the selections)."""
    *blocks, img, wrap = cands
    return (*(x.reshape(x.shape[0], -1) for x in blocks), img, wrap, blocks[0].shape[-1])


def _candidates(spec: NeighborSpec, coord, box, atype):
    """Every frame's candidate blocks (r2, idx, type, valid), each (nframes, natoms, noff, m), with the
    searched offsets' periodic images img (nframes, natoms, noff, 3) and the atoms' wraps (nframes,
    natoms, 3) (a candidate's shift is img + wrap[i] − wrap[j]); its cell overflow (nframes,); and the
    pair vector components (3 blocks (nframes, natoms, noff, m)). Vmapped over frames."""
    if box is None or not spec.pbc:
        box = jnp.zeros((coord.shape[0], 3, 3), coord.dtype)
    fn = {"cell": _build_cell, "minimage": _build_minimage}.get(spec.method, _build_brute)
    return jax.vmap(lambda c, b, t: fn(spec, c, b, t))(coord, box, atype)


class Candidates(NamedTuple):
    """Candidate pairs of every frame, unsorted and unselected (:func:`candidates`).

    Each centre atom is paired with m candidate atoms in each of noff searched images/cells:
    d: 3 arrays (nframes, natoms, noff, m), the pair vector components x, y, z (Å) from centre to candidate;
    r2: (nframes, natoms, noff, m) squared distances Å²;
    valid: (nframes, natoms, noff, m) bool, True for a neighbour within rcut (self and padding excluded);
    nneigh: (nframes, natoms, len(sel)) int32, neighbours of each section's type within rcut (as :func:`build`);
    cell_overflow: () bool, a cell held more atoms than the spec's capacity (re-``allocate``).
    """

    d: tuple
    r2: jax.Array
    valid: jax.Array
    nneigh: jax.Array
    cell_overflow: jax.Array


def candidates(spec: NeighborSpec, coord: jax.Array, box: jax.Array | None, atype: jax.Array) -> Candidates:
    """Candidate pairs of every frame, unsorted and unselected: what statistics need, without the
    selection into ``sel`` slots. coord (nframes, natoms, 3) Å; box (nframes, 3, 3) or None; atype
    (nframes, natoms). Returns a :class:`Candidates`."""
    cands, ovf, d = _candidates(spec, coord, box, atype)
    nneigh = jax.vmap(lambda c: _counts(spec, c[2], c[3]))(cands)
    return Candidates(d, cands[0], cands[3], nneigh, jnp.any(ovf))


def reduce_candidates(spec: NeighborSpec, fn, coord: jax.Array, box: jax.Array | None, atype: jax.Array):
    """``fn(cands, atype)`` for each frame in turn (``lax.map``), stacked over frames: cands the frame's
    :class:`Candidates` and atype its (1, natoms) types, both with a leading frame axis of 1. coord
    (nframes, natoms, 3) Å; box (nframes, 3, 3) or None; atype (nframes, natoms).

    For statistics that reduce the candidates: each frame's candidate blocks are reduced while they are
    in cache, and the cell list's gathers stay unbatched (vmapped over a chunk of frames, XLA CPU ran them
    several times slower)."""

    def one(frame):
        c, b, t = (None if x is None else x[None] for x in frame)
        return fn(candidates(spec, c, b, t), t)

    return jax.lax.map(one, (coord, box, atype))


# LLVM's optimisation level 1 for the programs that reduce candidate blocks on the CPU (as the evaluation
# step's, train.step.EVAL_CPU_OPTIONS): XLA's default level runs these reductions markedly slower on the CPU,
# with bitwise equal results and compiles as long, so the neighbour scan at start-up is shorter. The training
# step and the list builds gain nothing from it.
CPU_REDUCE_OPTIONS = {"xla_backend_optimization_level": 1}


def reduction_jit(fun=None, *, static_argnums=()):
    """``jax.jit`` for a program built on :func:`reduce_candidates` (the neighbour scan, the statistics'
    sums): compiled with :data:`CPU_REDUCE_OPTIONS` (those this jaxlib accepts,
    :func:`jaxmd_dp.compile_options.backend_options`) where the default backend is the CPU, with the backend's
    defaults elsewhere (chosen at the first call, not at import: that would start jax's backends). Use as
    ``@reduction_jit(static_argnums=...)``; ``options_for(backend)`` tells the options."""
    if fun is None:
        return functools.partial(reduction_jit, static_argnums=static_argnums)
    jitted: dict = {}
    lock = threading.Lock()  # the neighbour scan calls from two threads: one jit (one cache) per backend

    def options_for(backend: str) -> dict | None:
        return backend_options(tuple(CPU_REDUCE_OPTIONS.items()), "cpu", backend)

    @functools.wraps(fun)
    def call(*args):
        backend = jax.default_backend()
        with lock:
            if backend not in jitted:
                jitted[backend] = jax.jit(fun, static_argnums=static_argnums, compiler_options=options_for(backend))
            f = jitted[backend]
        return f(*args)

    call.options_for = options_for
    return call


def build(
    spec: NeighborSpec,
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
    kernels: str | None = None,
    order: str = "nearest",
) -> NeighborList:
    """Build the neighbour list of each frame.

    Args:
      spec: from :func:`allocate` (static).
      coord: (nframes, natoms, 3) Å.
      box: (nframes, 3, 3) Å, rows are cell vectors; ignored (may be None) when ``spec.pbc`` is False.
      atype: (natoms,) or (nframes, natoms) int, atom types; −1 marks padding atoms (never neighbours).
      kernels: "pallas" | "jnp" | "auto" (default: ``$JAXMD_DP_KERNELS``, else auto = Pallas on GPU).
      order: "nearest" — each type's neighbours nearest first (DeePMD-kit's list); "any" — the same
        neighbours in candidate order, without a sort, whenever no type overflows its ``sel`` (otherwise
        the nearest are kept, as with "nearest": jnp for the whole batch, the Pallas kernel for the block
        of centres concerned). The descriptors sum over slots, so both give the same model outputs up to
        float rounding; "any" is much cheaper (training), on CPU and GPU alike.

    Returns:
      A :class:`NeighborList` with ``nnei = sum(spec.sel)`` slots per atom.
    """
    if order not in ("nearest", "any"):
        raise ValueError(f"order must be 'nearest' or 'any', not {order!r}")
    if dispatch.use_pallas(kernels):
        from pallas_kernels.neighbor import build as build_kernel

        if spec.method == "minimage":  # the kernel's brute force over the images within k boxes finds them too
            spec = spec._replace(method="brute", reach=spec.ncell, ncell=(1, 1, 1))
        if len(spec.sel) == 1:  # one section: every type's neighbours, as type 0's to the kernel
            atype = jnp.minimum(jnp.asarray(atype), 0)
        inv = None if box is None or not spec.pbc else inverse_box(jnp.asarray(box))
        nl = build_kernel(spec, coord, box, atype, order=order, box_inverse=inv, interpret=dispatch.interpret_mode())
        return NeighborList(*nl)
    coord = jnp.asarray(coord)
    nf, natoms = coord.shape[:2]
    atype = jnp.broadcast_to(jnp.asarray(atype), (nf, natoms))
    cands, ovf, _ = _candidates(
        spec, jax.lax.stop_gradient(coord), None if box is None else jax.lax.stop_gradient(jnp.asarray(box)), atype
    )
    nneigh = jax.vmap(lambda c: _counts(spec, c[2], c[3]))(cands)
    nearest = jax.vmap(lambda c: _select_nearest(spec, *_flat(c)))
    if order == "nearest":
        idx, shift = nearest(cands)
    else:
        full = jnp.any(nneigh > jnp.asarray(spec.sel, jnp.int32))
        idx, shift = jax.lax.cond(full, nearest, jax.vmap(lambda c: _select_any(spec, *_flat(c))), cands)
    return NeighborList(idx, shift, nneigh, jnp.any(ovf))


def neighbor_list(
    coord: np.ndarray, box: np.ndarray | None, atype: np.ndarray, rcut: float, sel, method: str = "auto"
) -> NeighborList:
    """One-shot convenience: :func:`allocate` then :func:`build` (not for use inside ``jit``)."""
    spec = allocate(coord, box, rcut, sel, method)
    return build(spec, coord, box, atype)
