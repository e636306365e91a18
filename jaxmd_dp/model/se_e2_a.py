"""The se_e2_a ("smooth edition, two-body embedding, all information") descriptor as a Flax module.

For a centre atom i with normalised environment matrix R (nnei × 4) the descriptor is

    T = (1/nnei) Σ_j R_jᵀ G(s_j)          (4 × M1),  s_j = R_j0, G the embedding net of the slot's type
    D = Tᵀ T[:, :M2]                        (M1 × M2), flattened row-major → M1·M2 features

where nnei = sum(sel) is a constant (empty slots count, as in DeePMD-kit). Embedding nets: one per
neighbour type (``type_one_side``), else one per (neighbour type, centre type) pair, DeePMD-kit's net
index neighbour_type·ntypes + centre_type.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero, linear_call

from jaxmd_dp.geometry.computed_once import computed_once
from jaxmd_dp.geometry.pair_partner import section_partners
from jaxmd_dp.model.embed_table import table_env_product
from jaxmd_dp.model.nets import PRECISION, EmbeddingNet
from jaxmd_dp.model.pair_pack import Packing, empty_slot_term, packed_embedding
from jaxmd_dp.model.type_groups import default_capacity, gather_type, put_atoms, take_atoms


def env_product(R: jax.Array, G: jax.Array) -> jax.Array:
    """Σ_s R_sᵀ G_s over the slots: R (nf, n, s, 4), G (nf, n, s, M1) → (nf, n, 4, M1)."""
    return jnp.einsum("fnsa,fnsm->fnam", R, G, precision=PRECISION)


def _product_rt(RT: jax.Array, G: jax.Array) -> jax.Array:
    """Σ_s RT_sᵀ G_s with R given transposed: RT (nf, n, 4, s), G (nf, n, s, M1) → (nf, n, 4, M1)."""
    return jnp.einsum("fnas,fnsm->fnam", RT, G, precision=PRECISION)


def _r_product(ct: jax.Array, G: jax.Array) -> jax.Array:
    """Σ_m ct_am G_sm: T's cotangent ct (nf, n, 4, M1), G (nf, n, s, M1) → RT's cotangent (nf, n, 4, s)."""
    return jnp.einsum("fnam,fnsm->fnas", ct, G, precision=PRECISION)


def _spread(U: jax.Array, ct: jax.Array) -> jax.Array:
    """Σ_a U_as ct_am: U (nf, n, 4, s), ct (nf, n, 4, M1) → (nf, n, s, M1), as four element-wise products:
    the transpose in G of :func:`_product_rt` (U = RT, ct T's cotangent) and of :func:`_r_product`
    (U RT's cotangent). XLA CPU ran the dot_general form, a batched dot with an inner size of 4, at
    under 2 GFLOP/s (6 ms for the water step's (192, 72, 100) cotangent).

    ct is computed once (:func:`~jaxmd_dp.geometry.computed_once.computed_once`): it is a sum of the
    cotangents of T's readers (D = Tᵀ T<'s two products, one in (M1, 4) order, the 1/nnei scaling; in the
    weight gradient more terms), and XLA CPU fused that sum, transpose included, into each element of the
    spread, itself fused into the packed rows' gather (4.8 ms of the water float32 step's op time for the
    forces' spread of the H section alone). Read from memory, the step's gathers take 1.4 ms of op time
    instead of 6.9 (``bench/RESULTS.md``, session 40)."""
    ct = computed_once(ct)
    return sum(U[..., a, :, None] * ct[..., a:a + 1, :] for a in range(U.shape[-2]))


@jax.custom_jvp
def _env_product_rt(RT: jax.Array, G: jax.Array) -> jax.Array:
    """:func:`_product_rt` whose G-tangent term is a ``linear_call`` with :func:`_spread` as its transpose."""
    return _product_rt(RT, G)


def _env_product_rt_jvp(primals, tangents):
    RT, G = primals
    dRT, dG = tangents
    # JAX calls this rule only when dRT or dG is not a symbolic zero
    parts = [] if isinstance(dRT, SymbolicZero) else [_env_product_rt(dRT, G)]
    if not isinstance(dG, SymbolicZero):
        parts.append(linear_call(_product_rt, _spread, RT, dG))
    return _env_product_rt(RT, G), sum(parts[1:], parts[0])


_env_product_rt.defjvp(_env_product_rt_jvp, symbolic_zeros=True)


@jax.custom_jvp
def _r_cotangent(ct: jax.Array, G: jax.Array) -> jax.Array:
    """:func:`_r_product` whose G-tangent term is a ``linear_call`` with :func:`_spread` (of its cotangent
    computed once) as its transpose: the weight gradient's pass through the forces' R-cotangent."""
    return _r_product(ct, G)


def _r_cotangent_jvp(primals, tangents):
    ct, G = primals
    dct, dG = tangents
    parts = [] if isinstance(dct, SymbolicZero) else [_r_cotangent(dct, G)]
    if not isinstance(dG, SymbolicZero):
        parts.append(linear_call(_r_product, lambda c, u: _spread(computed_once(u), c), ct, dG))
    return _r_cotangent(ct, G), sum(parts[1:], parts[0])


_r_cotangent.defjvp(_r_cotangent_jvp, symbolic_zeros=True)


@jax.custom_vjp
def _env_product_train_rt(RT: jax.Array, G: jax.Array) -> jax.Array:
    """:func:`_product_rt` with its VJP written out: RT's cotangent from :func:`_r_cotangent`, G's from
    :func:`_spread` (a ``linear_call`` whose transpose is :func:`_product_rt`)."""
    return _env_product_rt(RT, G)


def _env_product_train_rt_fwd(RT, G):
    return _env_product_rt(RT, G), (RT, G)


def _env_product_train_rt_bwd(res, ct):
    RT, G = res
    return _r_cotangent(ct, G), linear_call(_spread, _product_rt, RT, ct)


_env_product_train_rt.defvjp(_env_product_train_rt_fwd, _env_product_train_rt_bwd)


def env_product_train(R: jax.Array, G: jax.Array) -> jax.Array:
    """:func:`env_product` for the training step: same values and first and second reverse-mode derivatives
    (forces and virials through R, then the weight gradient through those), in forms that XLA CPU runs
    faster. Reverse mode only (a ``custom_vjp``: no ``jax.jvp``), no vmap, no second derivative in R (the
    ``linear_call`` residuals carry no tangent); elsewhere use :func:`env_product`.

    - R is transposed to (nf, n, 4, s) and computed once into memory
      (:func:`~jaxmd_dp.geometry.computed_once.computed_once`), so that Rᵀ·G and its tangents are batched
      dots with the left operand's contracted axis innermost, which XLA CPU hands to its matmul library,
      on both cores; with R as (s, 4) it ran them through its generic dot, on one.
    - Every product that contracts R's 4 columns is four element-wise products (:func:`_spread`): G's
      cotangent in the forces' pass and in the weight gradient's, and the weight gradient's pass through
      the forces' R-cotangent, which autodiff gave as a batched dot with an inner size of 4.

    Water step, huge pages, one process alternating (``bench/RESULTS.md``, session 41): the transposed R
    float32 34.5 → 32.4 ms, float64 69.3 → 65.3 ms; the written-out R-cotangent a further 1.3–4.7 ms less
    float32 on one core (52.0 → 49.3 ms), 0–1.4 ms on two, float64 unchanged. Cu and Al-Cu-Mg unchanged
    or shorter."""
    return _env_product_train_rt(computed_once(jnp.swapaxes(R, -1, -2)), G)


class DescriptorSeA(nn.Module):
    """R: (nframes, natoms, nnei, 4), atype: (nframes, natoms) → D: (nframes, natoms, M1·M2)."""

    ntypes: int
    sel: Sequence[int]
    neuron: Sequence[int] = (25, 50, 100)
    axis_neuron: int = 16
    type_one_side: bool = True
    resnet_dt: bool = False
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float64

    def embedding_index(self, neighbor_type: int, centre_type: int) -> int:
        """DeePMD-kit's embedding-net index for a (neighbour, centre) type pair."""
        return neighbor_type if self.type_one_side else neighbor_type * self.ntypes + centre_type

    @nn.compact
    def __call__(self, R: jax.Array, atype: jax.Array, capacity: tuple[int, ...] | None = None,
                 packing: Packing | None = None) -> jax.Array:
        """capacity: most atoms of each type per frame (static; default natoms); used to run the
        centre-type embedding nets (type_one_side false) on their type's atoms only.
        packing: run the embedding nets on real pairs only (:mod:`jaxmd_dp.model.pair_pack`); same D.
        With ``packing.keep``, R holds only the first keep[t] slots of each type's section. Packing is
        the training step's path (:func:`env_product_train`); with ``packing.table`` Rᵀ·G comes from
        a node table of each net instead (:mod:`jaxmd_dp.model.embed_table`)."""
        R = R.astype(self.dtype)
        nets = {}

        def net(k):
            if k not in nets:
                nets[k] = EmbeddingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name=f"embed_{k}")
            return nets[k]

        if packing is not None and packing.partner is not None and not (self.type_one_side and packing.uniform):
            raise ValueError("pair partners need type_one_side and per-type (uniform) statistics")
        if self.type_one_side:
            return self._descriptor(R, lambda tj: net(self.embedding_index(tj, 0)), packing, atype)
        capacity = capacity or default_capacity(self.ntypes, R.shape[1])
        D = jnp.zeros(R.shape[:2] + (self.neuron[-1] * self.axis_neuron,), self.dtype)
        for ti in range(self.ntypes):
            order, valid = gather_type(atype, ti, max(1, capacity[ti]))
            pk = packing and packing._replace(mask=take_atoms(packing.mask, order) & valid[..., None])
            Di = self._descriptor(take_atoms(R, order), lambda tj, ti=ti: net(self.embedding_index(tj, ti)), pk, ti)
            D = put_atoms(D, order, valid, Di)
        return D

    def _descriptor(self, R: jax.Array, net_for, packing: Packing | None = None, centre=None) -> jax.Array:
        """D of each atom of R (nf, n, nnei, 4), with net_for(neighbour type) its embedding nets;
        centre: the atoms' types (nf, n), or one int type (used with ``packing`` only)."""
        nnei = int(sum(self.sel))
        sec = np.concatenate([[0], np.cumsum(self.sel)])
        held = packing.keep if packing is not None and packing.keep is not None else self.sel
        ksec = np.concatenate([[0], np.cumsum(held)])  # R's sections: the first held[t] slots of each type
        T = 0.0
        for tj in range(self.ntypes):
            Rt = R[:, :, ksec[tj] : ksec[tj + 1], :]  # (nf, n, held_t, 4)
            if packing is None:
                T = T + env_product(Rt, net_for(tj)(Rt[..., :1]))  # G: (nf, n, sel_t, M1)
            else:  # real pairs only; empty slots' share added from ntypes × sel_t evaluations
                mask = packing.mask[:, :, ksec[tj] : ksec[tj + 1]]
                empty = packing.empty[:, sec[tj] : sec[tj + 1], :].astype(self.dtype)
                if packing.table:  # Rᵀ·G from a node table, one matmul per atom
                    T = T + table_env_product(net_for(tj), Rt, mask, packing.table)
                else:  # the net on the packed pairs (once per pair with partners), 0 in empty slots
                    part = None if packing.partner is None else section_partners(
                        packing.partner[:, :, ksec[tj]:ksec[tj + 1]], int(ksec[-1]), int(ksec[tj]), int(held[tj]))
                    T = T + env_product_train(Rt, packed_embedding(net_for(tj), Rt, mask, packing.sizes[tj], part))
                T = T + empty_slot_term(net_for(tj), mask, empty, centre, packing.uniform)
        T = T / nnei
        D = jnp.einsum("fnam,fnak->fnmk", T, T[..., : self.axis_neuron], precision=PRECISION)
        return D.reshape(D.shape[:2] + (-1,))
