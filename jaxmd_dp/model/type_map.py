"""A trained model moved to another type map: kept types keep their weights and statistics, dropped types go,
new types come with fresh nets and statistics (DeePMD-kit's ``change_type_map``, used when fine-tuning).

DeePMD-kit (``deepmd/utils/finetune.py`` ``get_index_between_two_maps``, ``deepmd/dpmodel/atomic_model/
base_atomic_model.py``, ``descriptor/dpa1.py``, ``descriptor/descriptor.py`` ``extend_descrpt_stat``,
``utils/type_embed.py``) maps each new type to its index in the old map (:func:`type_index`), then

- the energy bias: kept types' values, 0 for a new type (the fine-tuning's bias change then sets it);
- the descriptor statistics davg/dstd: kept centre types' rows, a new type's row from statistics of the new
  data (``model_with_new_type_stat``);
- DPA-1 (se_atten, se_atten_v2; mixed types): the type embedding's rows, a new type's row drawn uniform in
  [0, 1) (DeePMD-kit draws it so; here from a seeded generator), the layer's skip (when its width is ntypes or
  2·ntypes) folded into the matrix before the rows move and taken out after; ``exclude_types`` pairs of kept
  types renumbered, others dropped. Every other weight is shared by all types and kept.

se_e2_a has per-type nets and neighbour sections, which DeePMD-kit does not move (its ``change_type_map``
raises). Here: embedding net k (neighbour type, or the (neighbour, centre) pair) and fitting net t follow
their types; a new type's nets are fresh (``fresh_params``); a new type's ``sel`` entry is given. Every
atom counts all sum(sel) slots, T = (1/nnei) Σ_j R_jᵀ G(s_j), so to leave a kept atom's energy unchanged:

- a kept centre type's slots of a new neighbour type get davg 0 (dstd from the new data): their empty rows
  are then 0 and add nothing to T;
- T scales by nnei_old/nnei_new and D = TᵀT[:, :M2] by its square: the kept fitting nets' first matrix is
  multiplied by (nnei_new/nnei_old)², which gives them the old D·matrix.

Exact for frames of kept types only, up to rounding, unless a dropped type's empty slots carried a nonzero
row (davg ≠ 0) or the fitting net's first layer has a skip (its width dim_descriptor or twice it): then
:func:`change_type_map` says so in its notes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.model.nets import has_skip

__all__ = ["change_type_map", "changed_hyper", "type_index"]


def type_index(old: Sequence[str], new: Sequence[str]) -> list[int | None]:
    """Each new type's index in the old type map, None for a type the old map lacks."""
    return [list(old).index(t) if t in old else None for t in new]


def changed_hyper(hyper: ModelHyper, type_map: Sequence[str], new_sel: Mapping[str, int] | None = None) -> ModelHyper:
    """``hyper`` on ``type_map``: per-type entries follow their types. se_e2_a: a kept type's ``sel`` entry,
    ``new_sel[name]`` for a new type (ValueError when absent); DPA-1: ``exclude_types`` pairs renumbered, those
    naming a dropped type left out."""
    type_map = tuple(type_map)
    index = type_index(hyper.type_map, type_map)
    d = hyper.descriptor
    if d.mixed_types:
        new_of = {o: i for i, o in enumerate(index) if o is not None}
        pairs = tuple((new_of[a], new_of[b]) for a, b in getattr(d, "exclude_types", ()) if a in new_of and b in new_of)
        d = dataclasses.replace(d, exclude_types=pairs) if hasattr(d, "exclude_types") else d
    else:
        new_sel = dict(new_sel or {})
        missing = [t for t, o in zip(type_map, index) if o is None and t not in new_sel]
        if missing:
            raise ValueError(f"sel of the new types {missing} is not given")
        sel = tuple(int(d.sel[o]) if o is not None else int(new_sel[t]) for t, o in zip(type_map, index))
        d = dataclasses.replace(d, sel=sel)
    return ModelHyper(type_map, d, hyper.fitting)


def change_type_map(
    hyper: ModelHyper,
    params,
    stats: Stats,
    new_hyper: ModelHyper,
    fresh_params=None,
    fresh_stats: Stats | None = None,
    seed: int = 0,
) -> tuple[dict, Stats, list[str]]:
    """``hyper``'s weights and statistics moved onto ``new_hyper`` (:func:`changed_hyper` of it).

    fresh_params, fresh_stats: weights and statistics of ``new_hyper`` (:func:`~jaxmd_dp.model.energy.init_params`
    and the new data's :func:`~jaxmd_dp.model.energy.stats_from_data`), read for the new types only; needed
    when there are new types. seed: a new type's DPA-1 type-embedding row. Returns (params, stats, notes):
    host arrays, and lines saying where a kept type's energies change. Stats: davg, dstd as
    ``new_hyper.descriptor.stat_shape``; energy_bias (ntypes,) eV."""
    index = type_index(hyper.type_map, new_hyper.type_map)
    if any(o is None for o in index) and (fresh_params is None or fresh_stats is None):
        raise ValueError("new types need fresh_params and fresh_stats of the new model")
    params = _host(params)
    fresh_params = None if fresh_params is None else _host(fresh_params)
    davg, dstd, bias = (np.asarray(s, np.float64) for s in stats)
    new_bias = np.array([bias[o] if o is not None else 0.0 for o in index])
    move = _mixed if hyper.descriptor.mixed_types else _per_type
    params, davg, dstd, notes = move(hyper, params, davg, dstd, new_hyper, index, fresh_params, fresh_stats, seed)
    return params, Stats(davg, dstd, new_bias), notes


def _host(tree):
    if isinstance(tree, Mapping):
        return {k: _host(v) for k, v in tree.items()}
    return np.asarray(tree)


def _rows(old: np.ndarray, fresh: np.ndarray | None, index) -> np.ndarray:
    """Row i: old[index[i]], or fresh[i] for a new type."""
    return np.stack([old[o] if o is not None else fresh[i] for i, o in enumerate(index)])


def _mixed(hyper, params, davg, dstd, new_hyper, index, fresh_params, fresh_stats, seed):
    """DPA-1: the type embedding's rows and the statistics' rows; every other weight kept."""
    ntypes, new_ntypes = hyper.ntypes, new_hyper.ntypes
    layer = dict(params["descriptor"]["type_embedding"]["layer_0"])
    matrix = np.asarray(layer["matrix"])
    width = matrix.shape[1]
    effective = matrix.astype(np.float64) + _skip(ntypes, width)
    drawn = np.random.default_rng(seed).random((new_ntypes, width))  # DeePMD-kit: uniform [0, 1)
    moved = _rows(effective, drawn, index) - _skip(new_ntypes, width)
    layer["matrix"] = moved.astype(matrix.dtype)
    descriptor = dict(params["descriptor"])
    descriptor["type_embedding"] = {**params["descriptor"]["type_embedding"], "layer_0": layer}
    fd, fs = (None, None) if fresh_stats is None else (np.asarray(fresh_stats.davg), np.asarray(fresh_stats.dstd))
    return {**params, "descriptor": descriptor}, _rows(davg, fd, index), _rows(dstd, fs, index), []


def _skip(ntypes: int, width: int) -> np.ndarray:
    """The type embedding's skip on the one-hot rows: I, [I, I], or 0 (:func:`~jaxmd_dp.model.nets.has_skip`)."""
    if not has_skip(ntypes, width):
        return np.zeros((ntypes, width))
    eye = np.eye(ntypes)
    return eye if width == ntypes else np.concatenate([eye, eye], axis=1)


def _sections(sel) -> list[slice]:
    edges = np.concatenate([[0], np.cumsum(sel)]).astype(int)
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def _per_type(hyper, params, davg, dstd, new_hyper, index, fresh_params, fresh_stats, seed):
    """se_e2_a: nets and neighbour sections follow their types (module doc)."""
    d, nd = hyper.descriptor, new_hyper.descriptor
    nt, new_nt = hyper.ntypes, new_hyper.ntypes
    old_sec, new_sec = _sections(d.sel), _sections(nd.sel)
    nnei, new_nnei = int(sum(d.sel)), int(sum(nd.sel))
    notes = []

    def net_of(u: int, t: int) -> str:  # embedding net of neighbour type u (and centre type t)
        return f"embed_{u if d.type_one_side else u * new_nt + t}"

    embed = {}
    for u, ou in enumerate(index):
        for t, ot in enumerate([0] if d.type_one_side else index):
            name = net_of(u, t)
            if ou is not None and ot is not None:
                embed[name] = params["descriptor"][f"embed_{ou if d.type_one_side else ou * nt + ot}"]
            else:
                embed[name] = fresh_params["descriptor"][name]
    scale = (new_nnei / nnei) ** 2
    fitting = {}
    for t, ot in enumerate(index):
        if ot is None:
            fitting[f"fit_{t}"] = fresh_params["fitting"][f"fit_{t}"]
            continue
        net = dict(params["fitting"][f"fit_{ot}"])
        if new_nnei != nnei:
            first = dict(net["layer_0"])
            first["matrix"] = (np.asarray(first["matrix"], np.float64) * scale).astype(first["matrix"].dtype)
            net["layer_0"] = first
        fitting[f"fit_{t}"] = net
    if new_nnei != nnei and has_skip(d.dim_out, new_hyper.fitting.neuron[0]):
        notes.append(
            f"the fitting nets' first layer has a skip (width {new_hyper.fitting.neuron[0]} for a descriptor of "
            f"{d.dim_out}): with nnei {nnei} → {new_nnei} the kept types' energies change"
        )

    shape = nd.stat_shape(new_nt)
    new_davg, new_dstd = np.zeros(shape), np.ones(shape)
    for t, ot in enumerate(index):
        if ot is None:  # a new centre type: the new data's statistics
            new_davg[t], new_dstd[t] = np.asarray(fresh_stats.davg)[t], np.asarray(fresh_stats.dstd)[t]
            continue
        for u, ou in enumerate(index):
            if ou is not None:
                new_davg[t, new_sec[u]] = davg[ot, old_sec[ou]]
                new_dstd[t, new_sec[u]] = dstd[ot, old_sec[ou]]
            else:  # slots of a new neighbour type: davg 0 (empty rows add nothing), the new data's dstd
                new_davg[t, new_sec[u]] = 0.0
                new_dstd[t, new_sec[u]] = np.asarray(fresh_stats.dstd)[t, new_sec[u]]
    kept = {o for o in index if o is not None}
    dropped = [hyper.type_map[o] for o in range(nt) if o not in kept]
    if dropped and any(np.any(davg[ot][old_sec[o]] != 0.0) for ot in kept for o in range(nt) if o not in kept):
        notes.append(
            f"dropping {dropped}: their empty neighbour slots held nonzero rows (davg ≠ 0), which counted in "
            "every atom's descriptor: the kept types' energies change"
        )
    # the nets of dropped types (and with pair nets, of their pairs) are left out
    descriptor = {k: v for k, v in params["descriptor"].items() if not k.startswith("embed_")}
    return {**params, "descriptor": {**descriptor, **embed}, "fitting": fitting}, new_davg, new_dstd, notes
