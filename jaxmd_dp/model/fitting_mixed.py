"""Energy fitting of a descriptor of mixed types: one fitting net for every atom type, descriptor → atomic
energy (eV), DeePMD-kit's ``ener`` fitting with ``mixed_types`` (``deepmd/dpmodel/fitting/general_fitting.py``).

The atom's type reaches the net through its descriptor (DPA-1 appends the centre's type embedding,
``concat_output_tebd``); the per-type energy bias is the model's (:class:`~jaxmd_dp.model.energy.Stats`).
:class:`MixedFittingHyper` holds the hyper-parameters (``model.fitting_net``, the keys of
:class:`~jaxmd_dp.model.fitting.FittingHyper`), :class:`MixedEnergyFitting` is the Flax module; its net is
``params["fitting"]["fit_0"]``, DeePMD-kit's ``nets.networks[0]``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxmd_dp.model.descriptor import DTYPES
from jaxmd_dp.model.fitting import FittingHyper
from jaxmd_dp.model.nets import FittingNet


class MixedEnergyFitting(nn.Module):
    """D: (nframes, natoms, dim), atype: (nframes, natoms) → E_i: (nframes, natoms) eV (no bias); padding
    atoms get a value the model masks."""

    neuron: Sequence[int] = (240, 240, 240)
    resnet_dt: bool = True
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float64

    @nn.compact
    def __call__(self, D: jax.Array, atype: jax.Array, capacity=None, reverse_only: bool = False) -> jax.Array:
        return FittingNet(self.neuron, self.activation, self.resnet_dt, self.dtype, name="fit_0")(D)[..., 0]


_DEEPMD_NET = re.compile(r"fitting_net\.filter_layers\.networks\.0\.layers\.(\d+)\.(matrix|bias|idt)$")


@dataclasses.dataclass(frozen=True)
class MixedFittingHyper(FittingHyper):
    """:class:`~jaxmd_dp.model.fitting.FittingHyper` (the same keys and file layout) for one net shared by
    every type."""

    def module(self, ntypes: int) -> MixedEnergyFitting:
        return MixedEnergyFitting(self.neuron, self.resnet_dt, self.activation, DTYPES[self.precision])

    @staticmethod
    def deepmd_param_path(key: str) -> tuple[str, ...] | None:
        """``fitting_net.filter_layers.networks.0.layers.{l}.{leaf}`` → (fitting, fit_0, layer_{l}, leaf)."""
        m = _DEEPMD_NET.match(key)
        return None if m is None else ("fitting", "fit_0", f"layer_{m[1]}", m[2])
