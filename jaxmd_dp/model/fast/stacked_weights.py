"""The weights with each group of stacked nets held as one subtree: the layout the training state keeps.

The nets that run stacked (:func:`jaxmd_dp.model.fast.net_groups.stack_nets`: the embedding nets
``embed_0 … embed_{K-1}``, the fitting nets ``fit_0 … fit_{K-1}``) are stacked again in every step
(:func:`~jaxmd_dp.model.fast.net_groups.stacked`). Held that way in the training state, each group is a
few arrays of shape (K, ...) instead of K subtrees: the optimizer's moments, its update and the weights'
update are a few kernels per group instead of a few per net, and the stack in the step and the slices of
its gradient fold away (XLA merges a concatenation of the contiguous slices of one array into that array).
Checkpoints, model files and :class:`jaxmd_dp.model.trained.Model` keep the per-net layout;
:func:`to_stacked` and :func:`to_nets` convert at those boundaries. The numbers are the same either way:
stacking and slicing copy weights, and the optimizers work entry by entry.

    held = to_stacked(params)          # {"descriptor": {"embed_*": {...(K, ...)}, ...}, ...}
    params = to_nets(held)             # back, on the host (numpy) or in a program (differentiable)
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.model.fast.net_groups import stack_nets

GROUPS = {"embed_": "embedding", "fit_": "fitting"}  # a net's name prefix → its kind in stack_nets
STACKED = "*"  # a stacked group's key: its prefix and this, e.g. "embed_*"
HELD = True  # False: :func:`to_stacked` stacks nothing (tests compare the training state held either way)
_NET = re.compile(r"^(" + "|".join(GROUPS) + r")(\d+)$")


def _groups(node: dict) -> dict[str, int]:
    """{prefix: K} of the groups of ``node``'s keys that run stacked: prefix0 … prefix{K-1}, all of one
    structure, shapes and dtypes."""
    found: dict[str, list[int]] = {}
    for key in node if HELD else ():
        m = _NET.match(key) if isinstance(key, str) else None
        if m:
            found.setdefault(m.group(1), []).append(int(m.group(2)))
    out = {}
    for prefix, ks in found.items():
        k = len(ks)
        if sorted(ks) != list(range(k)) or not stack_nets(GROUPS[prefix], k):
            continue
        shapes = [jax.tree_util.tree_map(lambda x: (x.shape, np.dtype(x.dtype)), node[f"{prefix}{i}"]) for i in ks]
        if all(s == shapes[0] for s in shapes[1:]):
            out[prefix] = k
    return out


def _is_dict(x) -> bool:
    return isinstance(x, dict)


def to_stacked(params, xp=np):
    """``params`` (nested dicts of arrays or ``jax.ShapeDtypeStruct``) with each group that runs stacked as
    one subtree under ``prefix + "*"``, leaves (K, ...). ``xp``: numpy on the host, jax.numpy in a program.
    A tree with no such group is returned as it is."""
    if not _is_dict(params):
        return params
    groups = _groups(params)
    out = {}
    for key, value in params.items():
        m = _NET.match(key) if isinstance(key, str) else None
        if m and m.group(1) in groups:
            if m.group(2) == "0":
                prefix, k = m.group(1), groups[m.group(1)]
                out[prefix + STACKED] = jax.tree_util.tree_map(
                    lambda *xs: _stack(xs, xp), *[params[f"{prefix}{i}"] for i in range(k)]
                )
            continue
        out[key] = to_stacked(value, xp)
    return out


def _stack(xs, xp):
    if isinstance(xs[0], jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct((len(xs),) + tuple(xs[0].shape), xs[0].dtype)
    return xp.stack(xs)


def to_nets(held):
    """The inverse of :func:`to_stacked`: each ``prefix + "*"`` subtree as its nets ``prefix0 …``. Host
    arrays are sliced on the host; in a program the slices are one split (its gradient a concatenation,
    which XLA folds with the stack in the step)."""
    if not _is_dict(held):
        return held
    out = {}
    for key, value in held.items():
        if isinstance(key, str) and key.endswith(STACKED) and key[: -len(STACKED)] in GROUPS:
            prefix = key[: -len(STACKED)]
            leaves, treedef = jax.tree_util.tree_flatten(value)
            k = leaves[0].shape[0]
            parts = [_split(x, k) for x in leaves]
            for i in range(k):
                out[f"{prefix}{i}"] = jax.tree_util.tree_unflatten(treedef, [p[i] for p in parts])
            continue
        out[key] = to_nets(value)
    return out


def _split(x, k: int) -> list:
    if isinstance(x, jax.ShapeDtypeStruct):
        return [jax.ShapeDtypeStruct(tuple(x.shape[1:]), x.dtype)] * k
    if isinstance(x, np.ndarray):
        return list(x)
    return [jnp.squeeze(p, 0) for p in jnp.split(x, k)]


def has_stacked(params) -> bool:
    """Whether ``params`` holds a stacked group (the training layout of a model with one)."""
    if not _is_dict(params):
        return False
    return any(
        (isinstance(k, str) and k.endswith(STACKED) and k[: -len(STACKED)] in GROUPS) or has_stacked(v)
        for k, v in params.items()
    )


def map_weight_trees(fn, tree, like):
    """``fn`` applied to every subtree of ``tree`` (an optimizer state) with the structure of ``like`` (the
    weights: Adam's moments, an average of the weights), the rest kept."""
    target = jax.tree_util.tree_structure(like)
    return jax.tree_util.tree_map(
        lambda x: fn(x) if jax.tree_util.tree_structure(x) == target else x,
        tree,
        is_leaf=lambda x: jax.tree_util.tree_structure(x) == target,
    )
