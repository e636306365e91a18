"""Energy fitting: one fitting net per centre type, descriptor → atomic energy (eV).

:class:`FittingHyper` holds its hyper-parameters (``model.fitting_net``), :class:`EnergyFitting` is the
Flax module.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxmd_dp.model.descriptor import DTYPES, precision_name
from jaxmd_dp.model.fast.net_groups import stack_nets, stacked, stacked_fitting
from jaxmd_dp.model.fast.type_groups import default_capacity, gather_type, put_atoms, take_atoms, take_atoms_rev
from jaxmd_dp.model.nets import FittingNet


class EnergyFitting(nn.Module):
    """D: (nframes, natoms, dim), atype: (nframes, natoms) → E_i: (nframes, natoms) eV (no bias).

    Padding atoms (atype −1) get 0.
    """

    ntypes: int
    neuron: Sequence[int] = (240, 240, 240)
    resnet_dt: bool = True
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(
        self, D: jax.Array, atype: jax.Array, capacity: tuple[int, ...] | None = None, reverse_only: bool = False
    ) -> jax.Array:
        """capacity: most atoms of each type per frame (static; default natoms): each net runs on its
        type's atoms only (see :mod:`jaxmd_dp.model.fast.type_groups`). reverse_only: the training step's path,
        differentiated in reverse mode only: the type blocks' gathers then have gathers as their VJP
        (:func:`~jaxmd_dp.model.fast.type_groups.take_atoms_rev`); forward mode (``jax.jvp``, Hessians) needs False.
        With many types (:func:`~jaxmd_dp.model.fast.net_groups.stack_nets`) the nets run stacked, one
        vmapped net over blocks of max(capacity) atoms per type
        (:func:`~jaxmd_dp.model.fast.net_groups.stacked_fitting`)."""
        if stack_nets("fitting", self.ntypes) and not self.is_initializing():
            weights = stacked(self.variables["params"], [f"fit_{t}" for t in range(self.ntypes)])
            proto = FittingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, parent=None)
            block = None if capacity is None else max(1, *capacity)
            atype = jnp.broadcast_to(atype, D.shape[:2])
            out = stacked_fitting(
                weights, lambda w, x: proto.apply({"params": w}, x), D, atype, self.ntypes, block, reverse_only
            )
            return out.astype(self.dtype)
        capacity = capacity or default_capacity(self.ntypes, D.shape[1])
        out = jnp.zeros(D.shape[:-1], self.dtype)
        for t in range(self.ntypes):
            order, valid = gather_type(atype, t, max(1, capacity[t]))
            net = FittingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name=f"fit_{t}")
            block = take_atoms_rev(D, atype, t, order, valid) if reverse_only else take_atoms(D, order)
            out = put_atoms(out, order, valid, net(block)[..., 0])
        return out


_DEEPMD_NET = re.compile(r"fitting_net\.filter_layers\.networks\.(\d+)\.layers\.(\d+)\.(matrix|bias|idt)$")


@dataclasses.dataclass(frozen=True)
class FittingHyper:
    """The energy fitting nets' hyper-parameters (``model.fitting_net``): neuron, hidden widths; resnet_dt,
    a learned timestep on the hidden layers' skips; activation (DeePMD-kit's ``activation_function``);
    precision, the nets' dtype name (DeePMD-kit's "default" read as float64). In the flat ``hyper`` dict of
    model files each key has the prefix ``fit_``."""

    neuron: tuple[int, ...]
    resnet_dt: bool
    activation: str
    precision: str

    @classmethod
    def from_config(cls, section) -> FittingHyper:
        """From a :class:`jaxmd_dp.config.FittingNetConfig`."""
        return cls(
            tuple(section.neuron),
            bool(section.resnet_dt),
            section.activation_function,
            precision_name(section.precision),
        )

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f"fit_{f.name}" for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, d: dict) -> FittingHyper:
        """From the flat ``hyper`` dict of a model file (its ``fit_*`` keys, every one present)."""
        return cls(tuple(d["fit_neuron"]), d["fit_resnet_dt"], d["fit_activation"], d["fit_precision"])

    def to_dict(self) -> dict:
        return {
            "fit_neuron": list(self.neuron),
            "fit_resnet_dt": self.resnet_dt,
            "fit_activation": self.activation,
            "fit_precision": self.precision,
        }

    def module(self, ntypes: int) -> EnergyFitting:
        return EnergyFitting(ntypes, self.neuron, self.resnet_dt, self.activation, DTYPES[self.precision])

    @staticmethod
    def deepmd_param_path(key: str) -> tuple[str, ...] | None:
        """``fitting_net.filter_layers.networks.{t}.layers.{l}.{leaf}`` → (fitting, fit_{t}, layer_{l}, leaf),
        or None for any other key."""
        m = _DEEPMD_NET.match(key)
        return None if m is None else ("fitting", f"fit_{m[1]}", f"layer_{m[2]}", m[3])
