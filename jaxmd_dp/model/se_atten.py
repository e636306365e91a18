"""DPA-1: DeePMD-kit's ``se_atten`` and ``se_atten_v2`` descriptors (attention over a type-embedded
environment), as a Flax module.

For a centre atom i of type t_i, its ``sel`` nearest neighbours of any type j (slots, "mixed types"), their
normalised environment rows R_j (:mod:`jaxmd_dp.geometry.env_mat`), types t_j and switches s_j = w(r_ij):

    T = the type table (:mod:`jaxmd_dp.model.type_embed`), one row per type and a zero row for padding
    concat:  G_j = N([R_j0, T[t_j], T[t_i]])           (T[t_i] left out with ``type_one_side``)
    strip:   G_j = N(R_j0) · N_t([T[t_j], T[t_i]]) + N(R_j0)      (N_t's output times s_j with smoothing)
    G ← attn_layer gated attention layers over the slots (:mod:`jaxmd_dp.model.attention`)
    A = (1/sel) Σ_j G_jᵀ R_j                      (M × 4)
    D = A A[:M2]ᵀ flattened (M·M2), then T[t_i] appended with ``concat_output_tebd``

as DeePMD-kit's dpmodel computes it (``deepmd/dpmodel/descriptor/dpa1.py``), empty slots included: an empty
slot's row is the normalised zero row −davg/dstd, its type that of the frame's first atom (DeePMD-kit reads
slot index 0 there), its switch 0 and it is masked in the attention. An excluded type pair
(``exclude_types``) is an empty slot whose row is zero. se_atten_v2 is se_atten with "strip" and smoothing.

:class:`SeAtten` / :class:`SeAttenV2` are the descriptors as the rest of the code sees them
(:mod:`jaxmd_dp.model.descriptor`); :class:`DescriptorSeAtten` is the Flax module. Weights under
``params["descriptor"]``: ``type_embedding``, ``embedding`` (N), ``embedding_strip`` (N_t, "strip" only),
``attention_{l}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import SimpleNamespace
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.env_mat import pair_vectors, smooth_weight
from jaxmd_dp.geometry.stats import env_mat_stats, scanned_sums, stats_from_sums
from jaxmd_dp.model.attention import GatedAttentionLayer, unit_rows
from jaxmd_dp.model.descriptor import DTYPES, Descriptor, FastPaths, precision_name
from jaxmd_dp.model.fast.embed_slope import net_value_and_slope, with_slope
from jaxmd_dp.model.fast.train_products import descriptor_product_train, env_product_train
from jaxmd_dp.model.nets import PRECISION, EmbeddingNet
from jaxmd_dp.model.type_embed import TypeEmbedding, padded_type


class Slots(NamedTuple):
    """What DPA-1 reads of each neighbour slot besides its row of R, each (nframes, natoms, nnei).

    type: the neighbour's type; in an empty (or excluded) slot the type of the frame's first atom, as
      DeePMD-kit gathers index 0 there (−1 for padding).
    real: a neighbour within rcut that is not an excluded pair.
    switch: w(r) of a real neighbour (:func:`~jaxmd_dp.geometry.env_mat.smooth_weight`), 0 elsewhere.
    keep: 0 where an excluded pair's row is zeroed, 1 elsewhere; None without ``exclude_types``.
    """

    type: jax.Array
    real: jax.Array
    switch: jax.Array
    keep: jax.Array | None = None


def slots_of(coord, box, atype, idx, shift, rcut: float, rcut_smth: float, exclude: tuple = ()) -> Slots:
    """:class:`Slots` of a neighbour list (idx, shift (nframes, natoms, nnei[, 3])) of these coordinates
    (nframes, natoms, 3) Å, box ((nframes, 3, 3), per atom (nframes, natoms, 3, 3), or None) and types
    (nframes, natoms); ``exclude``: pairs of types that do not see each other."""
    present = idx >= 0
    j = jnp.where(present, idx, 0)
    ntype = jax.vmap(lambda t, jj: t[jj])(atype, j)  # (nf, n, nnei); empty slots: the frame's atom 0
    real = present
    keep = None
    if exclude:
        ti = atype[..., None]
        pair_out = jnp.zeros_like(present)
        for a, b in exclude:
            pair_out = pair_out | ((ti == a) & (ntype == b)) | ((ti == b) & (ntype == a))
        pair_out = pair_out & present
        real = present & ~pair_out
        keep = jnp.where(pair_out, 0.0, 1.0).astype(coord.dtype)
        ntype = jnp.where(pair_out, atype[:, :1, None], ntype)
    d = pair_vectors(coord, box, idx, shift)
    d = jnp.where(present[..., None], d, 1.0)
    r = jnp.sqrt(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2])
    switch = jnp.where(real, smooth_weight(r, rcut_smth, rcut), 0.0)
    return Slots(ntype, real, switch, keep)


class DescriptorSeAtten(nn.Module):
    """R: (nframes, natoms, nnei, 4), atype: (nframes, natoms), slots: :class:`Slots` → D: (nframes, natoms,
    dim_out). Without ``slots`` every slot is empty (an atom with no neighbours; used to size the weights)."""

    ntypes: int
    nnei: int
    neuron: Sequence[int]
    axis_neuron: int
    tebd_dim: int
    strip: bool
    type_one_side: bool
    resnet_dt: bool
    activation: str
    attn: int
    attn_layer: int
    attn_dotr: bool
    scaling: float
    normalize: bool
    smooth: bool
    trainable_ln: bool
    ln_eps: float
    concat_output_tebd: bool
    use_tebd_bias: bool
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(
        self, R: jax.Array, atype: jax.Array, capacity=None, packing=None, slots: Slots | None = None
    ) -> jax.Array:
        if packing is not None and (packing.sizes is not None or packing.table or packing.partner is not None):
            raise ValueError("se_atten's one fast path is a cut list (FastPaths.cut)")
        # slots cut from the list (empty in every frame): their share is added from the empty rows
        missing = 0 if packing is None or packing.keep is None else self.nnei - int(sum(packing.keep))
        train = packing is not None  # the training step's path: reverse mode only
        nt = self.ntypes
        R = R.astype(self.dtype)
        if slots is None:
            empty = jnp.zeros(R.shape[:3], bool)
            slots = Slots(jnp.broadcast_to(atype[:, :1, None], R.shape[:3]), empty, empty.astype(self.dtype))
        if slots.keep is not None:
            R = R * slots.keep[..., None].astype(self.dtype)
        switch = slots.switch.astype(self.dtype)
        table = TypeEmbedding(nt, self.tebd_dim, self.use_tebd_bias, self.dtype, name="type_embedding")()
        ti, tj = padded_type(atype, nt), padded_type(slots.type, nt)  # rows of the table
        n1 = nt + 1
        embed = EmbeddingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name="embedding")
        if not self.strip:
            G = embed(self._concat_input(R[..., :1], table[tj], table[ti][:, :, None, :]))
        else:
            strip = EmbeddingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name="embedding_strip")
            if self.type_one_side:
                strip_table = jnp.broadcast_to(strip(table)[None], (n1, n1, self.neuron[-1]))
            else:  # [T[b], T[a]] for the pair (centre a, neighbour b)
                pairs = jnp.concatenate(
                    [
                        jnp.broadcast_to(table[None, :, :], (n1, n1, self.tebd_dim)),
                        jnp.broadcast_to(table[:, None, :], (n1, n1, self.tebd_dim)),
                    ],
                    axis=-1,
                )
                strip_table = strip(pairs)  # (centre, neighbour, M)
            Gt = _pair_rows(strip_table, ti, tj, train)  # (nf, n, nnei, M)
            if self.smooth:
                Gt = Gt * switch[..., None]
            Gs = _slot_embedding(embed, R[..., :1], train and self.activation == "tanh")
            G = Gs * Gt + Gs
        empty, first = None, None
        if missing:  # the cut slots' embeddings, per centre type (and first atom's type): (nt, U, missing, M)
            E = jnp.asarray(packing.empty, self.dtype)[:, self.nnei - missing :, :]  # (nt, missing, 4)
            empty, first = self._empty_embedding(E, table, embed, None if not self.strip else strip_table)
        direction = unit_rows(R[..., 1:4], 1e-12)
        for layer in range(self.attn_layer):
            out = GatedAttentionLayer(
                self.attn,
                self.scaling,
                self.normalize,
                self.smooth,
                self.attn_dotr,
                self.trainable_ln,
                self.ln_eps,
                self.dtype,
                name=f"attention_{layer}",
            )(G, slots.real, switch, direction, empty, missing)
            G, empty = (out, None) if empty is None else out
        if train:  # Rᵀ·G and D with their derivatives written out
            T = env_product_train(R, G)  # (nf, n, 4, M)
            if missing:
                T = T + jnp.swapaxes(self._cut_share(empty, E, first, atype), -1, -2)
            D = descriptor_product_train(T / self.nnei, self.axis_neuron)
        else:
            A = jnp.einsum("fnsm,fnsa->fnma", G, R, precision=PRECISION)  # (nf, n, M, 4)
            if missing:
                A = A + self._cut_share(empty, E, first, atype)
            A = A / self.nnei
            D = jnp.einsum("fnma,fnka->fnmk", A, A[:, :, : self.axis_neuron], precision=PRECISION)
        D = D.reshape(D.shape[:2] + (-1,))
        if self.concat_output_tebd:
            D = jnp.concatenate([D, table[ti]], axis=-1)
        return D

    def _cut_share(self, empty, E, first, atype):
        """Σ over the slots cut from the list of Gᵀ R, per atom: (nf, n, M, 4) from the empty slots' embeddings
        (nt, U, k, M) and rows E (nt, k, 4) (:meth:`_empty_embedding`)."""
        share = jnp.einsum("tukm,tka->tuma", empty, E, precision=PRECISION)  # (nt, U, M, 4)
        u = padded_type(atype[:, :1], self.ntypes) if first else jnp.zeros_like(atype[:, :1])
        return share[jnp.maximum(atype, 0), u]

    def _concat_input(self, s, neighbour, centre):
        """[s, T[t_j](, T[t_i])] broadcast over the slots: s (..., k, 1), the type rows (..., k or 1, tebd)."""
        shape = s.shape[:-1] + (self.tebd_dim,)
        parts = [s, jnp.broadcast_to(neighbour, shape)]
        if not self.type_one_side:
            parts.append(jnp.broadcast_to(centre, shape))
        return jnp.concatenate(parts, axis=-1)

    def _empty_embedding(self, E, table, embed, strip_table):
        """The embeddings G of empty slots with rows E (nt, k, 4) per centre type: (nt, U, k, M) and whether U
        runs over the type of the frame's first atom (the empty slots' neighbour type: n1 = ntypes + 1 rows,
        padding last) or is 1 (strip with smoothing, where that type is multiplied by a zero switch)."""
        nt, n1 = self.ntypes, self.ntypes + 1
        s = E[:, None, :, :1]  # (nt, 1, k, 1)
        if not self.strip:
            x = self._concat_input(
                jnp.broadcast_to(s, (nt, n1) + s.shape[2:]), table[None, :, None, :], table[:nt, None, None, :]
            )
            return embed(x), True
        Gs = embed(s)  # (nt, 1, k, M)
        if self.smooth:
            return Gs, False
        return Gs * strip_table[:nt, :, None, :] + Gs, True


def _pair_rows(table: jax.Array, ti: jax.Array, tj: jax.Array, train: bool) -> jax.Array:
    """table[ti, tj]: (nf, n, nnei, M) rows of a (centre, neighbour) table (n1, n1, M) for centre rows ti (nf, n)
    and neighbour rows tj (nf, n, nnei). On the training path a sum over the neighbour rows of selected
    terms (the same numbers): a gather's transpose is a scatter-add, which XLA CPU runs element by element."""
    if not train or table.shape[1] > 8:
        return table[ti[:, :, None], tj]
    rows = table[ti]  # (nf, n, n1, M): each atom's own
    return sum(
        jnp.where((tj == b)[..., None], rows[:, :, None, b, :], jnp.zeros((), table.dtype))
        for b in range(table.shape[1])
    )


def _slot_embedding(net: EmbeddingNet, s: jax.Array, slope: bool) -> jax.Array:
    """G(s) of the slots, s (..., 1) → (..., M); with ``slope`` (tanh nets, the training path) from the net's value
    and slope in one pass (:mod:`jaxmd_dp.model.fast.embed_slope`): its derivative in s is G′, not a pass back
    through the net (reverse mode, first derivatives in s only)."""
    if not slope:
        return net(s)
    flat = s.reshape(-1, 1)
    G, dG = net_value_and_slope(net, jax.lax.stop_gradient(flat))
    return with_slope(G, dG, flat).reshape(s.shape[:-1] + G.shape[-1:])


# The training step's XLA CPU options: YNNPACK for the matrix products only. Its reductions and element-wise
# kernels took the attention's many row sums (softmax, layer norms, unit rows, and their derivatives) as
# separate passes over the slots, where XLA's own loops fuse them with their producers.
CPU_OPTIONS = (("xla_cpu_experimental_ynn_fusion_type", "LIBRARY_FUSION_TYPE_DOT"),)


@dataclasses.dataclass(frozen=True)
class SeAtten(Descriptor):
    """DPA-1's hyper-parameters (``model.descriptor`` of type se_atten, DeePMD-kit's names; ``activation`` is
    its ``activation_function``, ``precision`` the nets' dtype name, "default" read as float64).

    sel: slots, the nearest neighbours of any type; rcut, rcut_smth: Å; neuron, axis_neuron, resnet_dt,
    type_one_side: the embedding net's; tebd_dim, tebd_input_mode ("concat" | "strip"), use_tebd_bias,
    concat_output_tebd: the type embedding's; attn, attn_layer, attn_dotr, scaling_factor, temperature (None:
    none), normalize, smooth_type_embedding, trainable_ln, ln_eps: the attention's; exclude_types: pairs of
    types that do not see each other. The module's weights do not depend on set_davg_zero (statistics only).
    """

    type_name = "se_atten"
    aliases = ("dpa1",)
    mixed_types = True
    deepmd_stat_keys = ("descriptor.se_atten.mean", "descriptor.se_atten.stddev")

    sel: int
    rcut: float
    rcut_smth: float
    neuron: tuple[int, ...]
    axis_neuron: int
    tebd_dim: int
    tebd_input_mode: str
    type_one_side: bool
    resnet_dt: bool
    activation: str
    precision: str
    attn: int
    attn_layer: int
    attn_dotr: bool
    scaling_factor: float
    temperature: float | None
    normalize: bool
    smooth_type_embedding: bool
    trainable_ln: bool
    ln_eps: float
    concat_output_tebd: bool
    use_tebd_bias: bool
    exclude_types: tuple[tuple[int, int], ...]

    @classmethod
    def from_config(cls, section, sel: tuple[int, ...] | None = None) -> SeAtten:
        """From a :class:`jaxmd_dp.config.model.SeAttenConfig` (or :class:`~jaxmd_dp.config.model.SeAttenV2Config`);
        ``sel``: (slots,) when the section's is "auto"."""
        sel = section.sel if sel is None else sel
        if isinstance(sel, str):
            raise ValueError(f"descriptor sel is {sel!r}, not a number")
        return cls(
            int(np.sum(sel)),
            float(section.rcut),
            float(section.rcut_smth),
            tuple(section.neuron),
            int(section.axis_neuron),
            int(section.tebd_dim),
            section.input_mode,
            bool(section.type_one_side),
            bool(section.resnet_dt),
            section.activation_function,
            precision_name(section.precision),
            int(section.attn),
            int(section.attn_layer),
            bool(section.attn_dotr),
            float(section.scaling_factor),
            None if section.temperature is None else float(section.temperature),
            bool(section.normalize),
            bool(section.smooth),
            bool(section.trainable_ln),
            1e-5 if section.ln_eps is None else float(section.ln_eps),
            bool(section.concat_output_tebd),
            bool(section.use_tebd_bias),
            tuple((int(a), int(b)) for a, b in section.exclude_types),
        )

    @property
    def scaling(self) -> float:
        """The attention logits' factor: the temperature, or (attn · scaling_factor)^-1/2."""
        return self.temperature if self.temperature is not None else (self.attn * self.scaling_factor) ** -0.5

    def module(self, ntypes: int) -> DescriptorSeAtten:
        for a, b in self.exclude_types:
            if not (0 <= a < ntypes and 0 <= b < ntypes):
                raise ValueError(f"exclude_types pair {[a, b]} names a type outside the {ntypes} types")
        return DescriptorSeAtten(
            ntypes,
            self.sel,
            self.neuron,
            self.axis_neuron,
            self.tebd_dim,
            self.tebd_input_mode == "strip",
            self.type_one_side,
            self.resnet_dt,
            self.activation,
            self.attn,
            self.attn_layer,
            self.attn_dotr,
            self.scaling,
            self.normalize,
            self.smooth_type_embedding,
            self.trainable_ln,
            self.ln_eps,
            self.concat_output_tebd,
            self.use_tebd_bias,
            DTYPES[self.precision],
        )

    @property
    def dim_out(self) -> int:
        return self.neuron[-1] * self.axis_neuron + (self.tebd_dim if self.concat_output_tebd else 0)

    @property
    def nlist_sel(self) -> tuple[int, ...]:
        return (self.sel,)

    def slot_inputs(self, coord, box, atype, nlist) -> Slots:
        return slots_of(coord, box, atype, nlist.idx, nlist.shift, self.rcut, self.rcut_smth, self.exclude_types)

    def env_stats(
        self, frames, ntypes: int, protect: float, scan=None, set_davg_zero: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """DeePMD-kit's ``EnvMatStatSe`` on the list of the nearest ``sel`` neighbours of any type: per centre
        type, one shift and scale for every slot (:mod:`jaxmd_dp.geometry.stats`). From the scan's sums when it
        summed the sampled frames and no sampled system has an atom with more than ``sel`` neighbours."""
        sums = None
        most = None if scan is None else getattr(scan, "max_nbor_any_per_system", None)
        if (
            scan is not None
            and scan.env_sums_per_system is not None
            and most is not None
            and all(np.all(most[f["sys_index"]] <= self.sel) for f in frames)
        ):
            sums = scanned_sums(frames, scan.env_sums_per_system, self.nnei)
        if sums is not None:
            return stats_from_sums(sums, self.nnei, protect, set_davg_zero)
        needs = SimpleNamespace(ntypes=ntypes, sel=(self.sel,), rcut=self.rcut, rcut_smth=self.rcut_smth)
        return env_mat_stats(frames, needs, protect, set_davg_zero=set_davg_zero)

    def deepmd_param_path(self, key: str) -> tuple[str, ...] | None:
        """PyTorch state-dict keys are not read for DPA-1 (its DeePMD-kit ``.dp`` file is,
        :mod:`jaxmd_dp.model.deepmd_file`)."""
        return None

    @property
    def fast_paths(self) -> FastPaths:
        """The list cut to the slots the data fills (``cut``: the rest's share from the empty rows, and with
        smoothing their weight in the attention's sums). Frames merge into one list of atoms unless an empty
        slot's type may reach the descriptor (its frame's first atom): with "concat", or "strip" without
        smoothing, the empty slots' embedding depends on it and their −davg/dstd rows (davg nonzero) carry it
        into D."""
        empty_reads_type = self.tebd_input_mode == "concat" or not self.smooth_type_embedding
        # per slot and layer the projections, 2·4·M·attn products; per pair of slots 2·(attn + M)
        m, d = self.neuron[-1], self.attn
        weight = (d + m) / (4.0 * m * d) if self.attn_layer else 0.0
        return FastPaths(
            cut=True,
            merge=not empty_reads_type,
            tiers=not empty_reads_type,
            pair_weight=weight,
            cpu_options=CPU_OPTIONS,
        )


@dataclasses.dataclass(frozen=True)
class SeAttenV2(SeAtten):
    """se_atten_v2: :class:`SeAtten` with ``tebd_input_mode`` "strip" and ``smooth_type_embedding`` true."""

    type_name = "se_atten_v2"
    aliases = ()

    def __post_init__(self):
        if self.tebd_input_mode != "strip" or not self.smooth_type_embedding:
            raise ValueError("se_atten_v2 has tebd_input_mode 'strip' and smooth_type_embedding true")
