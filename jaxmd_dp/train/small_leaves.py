"""The model's many small weights as one array per dtype: an optax wrapper whose inner optimizer sees them
packed, and the conversions that keep checkpoints in the per-weight layout.

An se_e2_a model has 16-48 weight arrays on the ASC22 inputs (Cu to Al-Cu-Mg), two thirds of them of at most a
few hundred entries (biases, ``idt``, one-row and one-column matrices; water: 22 of 32). Compiled for the CPU,
every array an optimizer writes is a kernel of its own (XLA CPU has no multi-output fusion), and every kernel
costs compile time whatever its size.
Adam over the packed small weights writes two moment arrays instead of two per weight: the training step
compiles several dozen fewer kernels (with :func:`jaxmd_dp.train.step.all_finite` on the packed leaves too);
the packing copies a few thousand numbers a step.

    opt = pack_small_leaves(optax.adam(1e-3))
    state = opt.init(params)                 # the inner state holds Packed trees
    updates, state = opt.update(grads, state, params)   # updates shaped as params
    saved = unpack_state(state, params)      # the inner optimizer's own layout (checkpoints)
    state = pack_state(saved, state)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

SMALL_LEAF = 1024  # entries: a weight array this small is packed


class Packed(NamedTuple):
    """A tree with its small leaves packed. large: the leaves of more than :data:`SMALL_LEAF` entries, in
    tree order; small: the other leaves raveled and concatenated in tree order, one (n,) array per dtype
    (dtypes sorted by name)."""

    large: tuple
    small: tuple


def _is_small(x) -> bool:
    return int(np.prod(x.shape, dtype=np.int64)) <= SMALL_LEAF


def _small_dtypes(leaves) -> list:
    return sorted({np.dtype(x.dtype).name for x in leaves if _is_small(x)})


def pack(tree, xp=jnp) -> Packed:
    """``tree`` with its small leaves concatenated (``xp``: jax.numpy in a program, numpy on the host)."""
    leaves = jax.tree_util.tree_leaves(tree)
    small = tuple(
        xp.concatenate([xp.reshape(x, (-1,)) for x in leaves if _is_small(x) and np.dtype(x.dtype).name == d])
        for d in _small_dtypes(leaves)
    )
    return Packed(tuple(x for x in leaves if not _is_small(x)), small)


def unpack(packed: Packed, like):
    """The tree shaped as ``like`` (a tree of arrays or ``jax.ShapeDtypeStruct``) from its :func:`pack`."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    dtypes = _small_dtypes(leaves)
    large = iter(packed.large)
    offset = dict.fromkeys(dtypes, 0)
    out = []
    for x in leaves:
        if not _is_small(x):
            out.append(next(large))
            continue
        d = np.dtype(x.dtype).name
        n = int(np.prod(x.shape, dtype=np.int64))
        out.append(packed.small[dtypes.index(d)][offset[d] : offset[d] + n].reshape(x.shape))
        offset[d] += n
    return jax.tree_util.tree_unflatten(treedef, out)


def pack_small_leaves(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """``inner`` applied to the updates (and params) with their small leaves packed (:func:`pack`); its
    state then holds :class:`Packed` trees where it would hold trees shaped as the params. Element-wise
    optimizers (Adam, SGD, weight decay, schedules) give the same updates either way."""

    def init(params):
        return inner.init(pack(params))

    def update(updates, state, params=None):
        new, state = inner.update(pack(updates), state, None if params is None else pack(params))
        return unpack(new, updates), state

    return optax.GradientTransformation(init, update)


def unpack_state(state, params):
    """A :func:`pack_small_leaves` state in its inner optimizer's layout: each :class:`Packed` tree shaped as
    ``params`` (arrays or shapes). Host arrays (numpy) are sliced on the host, compiling nothing."""
    return jax.tree_util.tree_map(
        lambda x: unpack(x, params) if isinstance(x, Packed) else x, state, is_leaf=lambda x: isinstance(x, Packed)
    )


def pack_state(state, like):
    """The inverse of :func:`unpack_state` on the host (numpy): ``state`` in the inner optimizer's layout,
    packed where ``like`` (a packed state or its shapes, e.g. from ``jax.eval_shape`` of the wrapper's
    ``init``) has a :class:`Packed` tree."""
    nodes, treedef = jax.tree_util.tree_flatten(like, is_leaf=lambda x: isinstance(x, Packed))
    parts = treedef.flatten_up_to(state)
    return treedef.unflatten([pack(s, np) if isinstance(n, Packed) else s for n, s in zip(nodes, parts)])
