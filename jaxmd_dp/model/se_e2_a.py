"""The se_e2_a ("smooth edition, two-body embedding, all information") descriptor as a Flax module.

For a centre atom i with normalised environment matrix R (nnei × 4) the descriptor is

    T = (1/nnei) Σ_j R_jᵀ G(s_j)          (4 × M1),  s_j = R_j0, G the embedding net of the slot's type
    D = Tᵀ T[:, :M2]                        (M1 × M2), flattened row-major → M1·M2 features

where nnei = sum(sel) is a constant (empty slots count, as in DeePMD-kit). Embedding nets: one per
neighbour type (``type_one_side``), else one per (neighbour type, centre type) pair, DeePMD-kit's net
index neighbour_type·ntypes + centre_type.

:class:`SeE2A` is the descriptor as the rest of the code sees it (:mod:`jaxmd_dp.model.descriptor`): its
hyper-parameters (``model.descriptor``), statistics (:mod:`jaxmd_dp.geometry.stats`), DeePMD-kit's weight
names and its fast paths; :class:`DescriptorSeA` is its Flax module.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from types import SimpleNamespace

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.pair_partner import section_partners
from jaxmd_dp.geometry.stats import env_mat_stats, scanned_sums, stats_from_sums
from jaxmd_dp.model.descriptor import DTYPES, Descriptor, FastPaths, precision_name
from jaxmd_dp.model.fast.embed_table import table_env_product
from jaxmd_dp.model.fast.net_groups import grouped_empty_term, slope_of, stack_nets, stacked, tiled_embedding
from jaxmd_dp.model.fast.pair_pack import Packing, empty_slot_term, packed_embedding
from jaxmd_dp.model.fast.train_products import descriptor_product_train, env_product_train
from jaxmd_dp.model.fast.type_groups import default_capacity, gather_type, put_atoms, take_atoms
from jaxmd_dp.model.nets import PRECISION, EmbeddingNet


def env_product(R: jax.Array, G: jax.Array) -> jax.Array:
    """Σ_s R_sᵀ G_s over the slots: R (nf, n, s, 4), G (nf, n, s, M1) → (nf, n, 4, M1)."""
    return jnp.einsum("fnsa,fnsm->fnam", R, G, precision=PRECISION)


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
    def __call__(
        self, R: jax.Array, atype: jax.Array, capacity: tuple[int, ...] | None = None, packing: Packing | None = None
    ) -> jax.Array:
        """capacity: most atoms of each type per frame (static; default natoms); used to run the
        centre-type embedding nets (type_one_side false) on their type's atoms only.
        packing: run the embedding nets on real pairs only (:mod:`jaxmd_dp.model.fast.pair_pack`); same D.
        With ``packing.keep``, R holds only the first keep[t] slots of each type's section. Packing is
        the training step's path (:func:`env_product_train`); with ``packing.table`` Rᵀ·G comes from
        a node table of each net instead (:mod:`jaxmd_dp.model.fast.embed_table`).

        With many nets (:func:`~jaxmd_dp.model.fast.net_groups.stack_nets`) the nets run stacked, every
        slot through its own net in one program (:meth:`_stacked`; not with ``packing.table``, nor with
        empty rows that differ from slot to slot)."""
        R = R.astype(self.dtype)
        if packing is not None and packing.partner is not None and not (self.type_one_side and packing.uniform):
            raise ValueError("pair partners need type_one_side and per-type (uniform) statistics")
        if (
            stack_nets("embedding", self.nnets)
            and not self.is_initializing()
            and (packing is None or (not packing.table and packing.uniform))
        ):
            return self._stacked(R, jnp.broadcast_to(atype, R.shape[:2]), packing)
        nets = {}

        def net(k):
            if k not in nets:
                nets[k] = EmbeddingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name=f"embed_{k}")
            return nets[k]

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

    @property
    def nnets(self) -> int:
        """Embedding nets: ntypes, or ntypes² without ``type_one_side``."""
        return self.ntypes if self.type_one_side else self.ntypes**2

    def _stacked(self, R: jax.Array, atype: jax.Array, packing: Packing | None) -> jax.Array:
        """D with the embedding nets stacked (:mod:`jaxmd_dp.model.fast.net_groups`): each slot's s through
        the net of its (neighbour type[, centre type]) in one tiled program, then Rᵀ·G over all slots at
        once. Without ``packing`` every slot of a real atom is a row (empty slots hold their normalised
        empty row, as DeePMD-kit's); with it, the real pairs only and the empty slots' share from one row
        per (centre type, neighbour type)."""
        nt, nf, n = self.ntypes, R.shape[0], R.shape[1]
        held = packing.keep if packing is not None and packing.keep is not None else self.sel
        nk = int(sum(held))
        weights = stacked(self.variables["params"], [f"embed_{k}" for k in range(self.nnets)])
        proto = EmbeddingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, parent=None)

        def apply(w, x, ds=None):
            return proto.apply({"params": w}, x, ds)

        section = jnp.asarray(np.repeat(np.arange(nt), held), jnp.int32)  # each slot's neighbour type
        centre = jnp.clip(atype, 0, nt - 1).astype(jnp.int32)
        net = section * (1 if self.type_one_side else nt) + (0 if self.type_one_side else centre[..., None])
        net = jnp.broadcast_to(net, (nf, n, nk)).reshape(nf, n * nk)
        s = R[..., 0].reshape(nf, n * nk)
        real = jnp.broadcast_to((atype >= 0)[..., None], (nf, n, nk))
        if packing is None:
            G = tiled_embedding(weights, apply, s, net, real.reshape(nf, -1), self.nnets, n * nk)
            T = env_product(R, G.reshape(nf, n, nk, -1)) / self.nnei
            D = jnp.einsum("fnam,fnak->fnmk", T, T[..., : self.axis_neuron], precision=PRECISION)
            return D.reshape(nf, n, -1)
        mask = packing.mask & real
        flat = mask.reshape(nf, -1)
        partner = None if packing.partner is None else packing.partner.reshape(nf, -1)
        kept = flat if partner is None else flat & ((partner < 0) | (jnp.arange(n * nk) < partner))
        G = tiled_embedding(
            weights,
            apply,
            s,
            net,
            kept,
            self.nnets,
            int(sum(packing.sizes)),
            mask=flat,
            partner=partner,
            reverse_only=True,
            slope=slope_of(apply, self.activation == "tanh"),
        )
        T = env_product_train(R, G.reshape(nf, n, nk, -1))
        centre_of, neighbour_of = np.meshgrid(np.arange(nt), np.arange(nt), indexing="ij")
        net_of = neighbour_of if self.type_one_side else neighbour_of * nt + centre_of  # (centre, neighbour) → net
        T = T + grouped_empty_term(weights, apply, net_of, mask, packing.empty, atype, self.sel, held)
        D = descriptor_product_train(T / self.nnei, self.axis_neuron)
        return D.reshape(nf, n, -1)

    @property
    def nnei(self) -> int:
        return int(sum(self.sel))

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
                    part = (
                        None
                        if packing.partner is None
                        else section_partners(
                            packing.partner[:, :, ksec[tj] : ksec[tj + 1]], int(ksec[-1]), int(ksec[tj]), int(held[tj])
                        )
                    )
                    T = T + env_product_train(Rt, packed_embedding(net_for(tj), Rt, mask, packing.sizes[tj], part))
                T = T + empty_slot_term(net_for(tj), mask, empty, centre, packing.uniform)
        T = T / nnei
        if packing is None:
            D = jnp.einsum("fnam,fnak->fnmk", T, T[..., : self.axis_neuron], precision=PRECISION)
        else:  # the training path: derivatives written out (reverse mode only)
            D = descriptor_product_train(T, self.axis_neuron)
        return D.reshape(D.shape[:2] + (-1,))


_DEEPMD_NET = re.compile(r"descriptor\.sea\.filter_layers\.networks\.(\d+)\.layers\.(\d+)\.(matrix|bias|idt)$")


@dataclasses.dataclass(frozen=True)
class SeE2A(Descriptor):
    """se_e2_a's hyper-parameters (``model.descriptor``, DeePMD-kit's names; ``activation`` is its
    ``activation_function``, ``precision`` the nets' dtype name, DeePMD-kit's "default" read as float64).

    sel: (ntypes,) slots per neighbour type; rcut, rcut_smth: Å; neuron: embedding-net widths (M1 =
    neuron[-1]); axis_neuron: M2; type_one_side: one embedding net per neighbour type (else one per
    (neighbour, centre) type pair); resnet_dt: a learned timestep on the embedding layers' skips.
    """

    type_name = "se_e2_a"
    aliases = ("se_a",)
    deepmd_stat_keys = ("descriptor.sea.mean", "descriptor.sea.stddev")

    sel: tuple[int, ...]
    rcut: float
    rcut_smth: float
    neuron: tuple[int, ...]
    axis_neuron: int
    type_one_side: bool
    resnet_dt: bool
    activation: str
    precision: str

    @classmethod
    def from_config(cls, section, sel: tuple[int, ...] | None = None) -> SeE2A:
        """From a :class:`jaxmd_dp.config.DescriptorConfig`; ``sel`` replaces the section's (e.g. "auto"
        resolved from the data)."""
        sel = section.sel if sel is None else sel
        if isinstance(sel, str):
            raise ValueError(f"descriptor sel is {sel!r}, not a list")
        return cls(
            tuple(int(s) for s in sel),
            float(section.rcut),
            float(section.rcut_smth),
            tuple(section.neuron),
            int(section.axis_neuron),
            bool(section.type_one_side),
            bool(section.resnet_dt),
            section.activation_function,
            precision_name(section.precision),
        )

    def module(self, ntypes: int) -> DescriptorSeA:
        return DescriptorSeA(
            ntypes,
            self.sel,
            self.neuron,
            self.axis_neuron,
            self.type_one_side,
            self.resnet_dt,
            self.activation,
            DTYPES[self.precision],
        )

    @property
    def dim_out(self) -> int:
        return self.neuron[-1] * self.axis_neuron

    @property
    def nlist_sel(self) -> tuple[int, ...]:
        return self.sel

    def env_stats(
        self, frames, ntypes: int, protect: float, scan=None, set_davg_zero: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """DeePMD-kit's ``EnvMatStatSe`` (:mod:`jaxmd_dp.geometry.stats`): per centre type, one shift and
        scale for every slot. With a ``scan`` that summed the sampled frames' environment matrices (its
        systems begin with the frames'), the sums are added up from it instead of a second pass over the
        frames, unless some sampled system has more neighbours of a type than sel (then only the nearest
        sel count: the pass over the frames does that)."""
        sums = None
        if (
            scan is not None
            and scan.env_sums_per_system is not None
            and all(np.all(scan.max_nbor_per_system[f["sys_index"]] <= np.asarray(self.sel)) for f in frames)
        ):
            sums = scanned_sums(frames, scan.env_sums_per_system, self.nnei)  # None if a frame was not summed
        if sums is not None:
            return stats_from_sums(sums, self.nnei, protect, set_davg_zero)
        needs = SimpleNamespace(ntypes=ntypes, sel=self.sel, rcut=self.rcut, rcut_smth=self.rcut_smth)
        return env_mat_stats(frames, needs, protect, set_davg_zero=set_davg_zero)

    def deepmd_param_path(self, key: str) -> tuple[str, ...] | None:
        """``descriptor.sea.filter_layers.networks.{k}.layers.{l}.{leaf}`` → (descriptor, embed_{k},
        layer_{l}, leaf): DeePMD-kit's net k is :meth:`DescriptorSeA.embedding_index`'s."""
        m = _DEEPMD_NET.match(key)
        return None if m is None else ("descriptor", f"embed_{m[1]}", f"layer_{m[2]}", m[3])

    @property
    def fast_paths(self) -> FastPaths:
        """Pair packing and tables always; pair partners with one net per neighbour type (both slots of a
        same-type pair then run the same net on the same s)."""
        return FastPaths(pack=True, table=True, partners=self.type_one_side)
