"""The ``model`` section: element names, the descriptor, the fitting net, the data statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxmd_dp.config.checks import (
    PRECISIONS,
    activation,
    boolean,
    choice,
    element_names,
    instance_of,
    integer,
    list_of,
    nonneg_float,
    optional,
    pos_float,
    pos_int,
    sel_rule,
)
from jaxmd_dp.config.fixed import Fixed, not_ours, only, unsupported
from jaxmd_dp.config.section import Section, entry, key_error


@dataclass(frozen=True, kw_only=True)
class DescriptorConfig(Section):
    """``model.descriptor``: the se_e2_a (DeepPot-SE, two-body embedding, full relative coordinates) descriptor.

    type: "se_e2_a" ("se_a" is read as "se_e2_a").
    sel: max neighbours kept per neighbour type, tuple of ints (one per type); or "auto" / "auto:<factor>",
        kept as given for the trainer to resolve from the data (DeePMD-kit: factor x max count, rounded up to 4).
    rcut: cut-off radius, Å.  rcut_smth: where the 1/r smoothing starts, Å (0 <= rcut_smth < rcut).
    neuron: embedding-net widths.  axis_neuron: M2, columns of G kept for D (<= neuron[-1]).
    type_one_side: true -> one embedding net per neighbour type; false -> one per (centre, neighbour) pair.
    resnet_dt: a trainable "timestep" on skip connections.  activation_function: one of ``ACTIVATIONS``.
    precision: one of ``PRECISIONS``.  seed: initialisation seed or None (then training.seed).
    set_davg_zero: the env-matrix mean davg stays zero; dstd is computed as without it (DeePMD-kit).
    """

    _path = "model.descriptor"
    _aliases = {"n_axis_neuron": "axis_neuron"}
    _fixed = {"trainable": only(True), "exclude_types": only([]), "env_protection": only(0.0)}
    _forbidden = {"type_map": "not allowed here; the type map is model.type_map"}

    type: str = entry(choice({"se_e2_a": "se_e2_a", "se_a": "se_e2_a"}))
    sel: tuple[int, ...] | str = entry(sel_rule, "auto")
    rcut: float = entry(pos_float, 6.0)
    rcut_smth: float = entry(nonneg_float, 0.5)
    neuron: tuple[int, ...] = entry(list_of(pos_int, "positive integers"), (10, 20, 40))
    axis_neuron: int = entry(pos_int, 4)
    type_one_side: bool = entry(boolean, False)
    resnet_dt: bool = entry(boolean, False)
    activation_function: str = entry(activation, "tanh")
    precision: str = entry(choice(PRECISIONS), "default")
    seed: int | None = entry(optional(integer), None)
    set_davg_zero: bool = entry(boolean, False)

    def _check(self) -> None:
        if self.rcut_smth >= self.rcut:
            raise key_error(
                f"{self._path}.rcut_smth", f"must be smaller than rcut ({self.rcut:g}), got {self.rcut_smth:g}"
            )
        if self.axis_neuron > self.neuron[-1]:
            raise key_error(
                f"{self._path}.axis_neuron",
                f"must be <= the last embedding width neuron[-1] = {self.neuron[-1]}, got {self.axis_neuron}",
            )


def _all_true(v: Any) -> bool:
    return v is True or (isinstance(v, (list, tuple)) and bool(v) and all(x is True for x in v))


@dataclass(frozen=True, kw_only=True)
class FittingNetConfig(Section):
    """``model.fitting_net``: the energy fitting net (one per atom type), descriptor -> atomic energy (eV).

    type: "ener".  neuron: hidden widths.  resnet_dt: trainable timestep on skip connections.
    activation_function, precision: as in :class:`DescriptorConfig`.
    seed: when set and not the descriptor's seed, the fitting nets' weights are drawn from a generator of
    their own seeded by it; else they follow the descriptor's in one stream.
    """

    _path = "model.fitting_net"
    _aliases = {"n_neuron": "neuron"}
    _fixed = {
        "numb_fparam": only(0),
        "numb_aparam": only(0),
        "default_fparam": only(None),
        "dim_case_embd": only(0),
        "rcond": only(None),
        "atom_ener": only([]),
        "use_aparam_as_mask": only(False),
        "layer_name": unsupported("layer_name (parameter sharing)"),
        "trainable": Fixed(_all_true, "only true is supported", True),
    }

    type: str = entry(choice(("ener",)), "ener")
    neuron: tuple[int, ...] = entry(list_of(pos_int, "positive integers"), (120, 120, 120))
    resnet_dt: bool = entry(boolean, True)
    activation_function: str = entry(activation, "tanh")
    precision: str = entry(choice(PRECISIONS), "default")
    seed: int | None = entry(optional(integer), None)


def _bridging_off(v: Any) -> bool:
    return isinstance(v, str) and v.lower() == "none"


@dataclass(frozen=True, kw_only=True)
class ModelConfig(Section):
    """``model``: element names, descriptor, fitting net and data-statistics settings.

    type_map: element name of each type index (unique).
    data_stat_nbatch: frames per system sampled for the env-matrix statistics (davg/dstd) and energy bias.
    data_stat_protect: floor of the env-matrix standard deviation.
    """

    _path = "model"
    _fixed = {
        "type": only("standard"),
        "pair_exclude_types": only([]),
        "atom_exclude_types": only([]),
        "preset_out_bias": only(None),
        "srtab_add_bias": only(True),
        "model_branch_alias": only([]),
        "info": only({}),
        "bridging_method": Fixed(_bridging_off, "only 'None' is supported", "None"),
        "bridging_r_inner": not_ours(0.5, "bridging_r_inner (ZBL bridging)"),
        "bridging_r_outer": not_ours(0.8, "bridging_r_outer (ZBL bridging)"),
        "data_bias_nsample": not_ours(10, "data_bias_nsample (changing a pretrained model's energy bias)"),
        "use_srtab": unsupported("use_srtab (tabulated short-range pair potential)"),
        "smin_alpha": unsupported("smin_alpha"),
        "sw_rmin": unsupported("sw_rmin"),
        "sw_rmax": unsupported("sw_rmax"),
        "type_embedding": unsupported("type_embedding"),
        "modifier": unsupported("modifier"),
        "compress": unsupported("compress"),
        "spin": unsupported("spin"),
        "finetune_head": unsupported("finetune_head"),
    }

    type_map: tuple[str, ...] = entry(element_names)
    descriptor: DescriptorConfig = entry(instance_of(DescriptorConfig), section=DescriptorConfig)
    fitting_net: FittingNetConfig = entry(instance_of(FittingNetConfig), section=FittingNetConfig)
    data_stat_nbatch: int = entry(pos_int, 10)
    data_stat_protect: float = entry(pos_float, 0.01)

    def _check(self) -> None:
        sel = self.descriptor.sel
        if not isinstance(sel, str) and len(sel) != len(self.type_map):
            raise key_error(
                "model.descriptor.sel",
                f"has {len(sel)} entries but model.type_map has {len(self.type_map)} types {list(self.type_map)}",
            )
