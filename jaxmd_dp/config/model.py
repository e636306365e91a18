"""The ``model`` section: element names, the descriptor, the fitting net, the data statistics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jaxmd_dp.config.checks import (
    PRECISIONS,
    Bad,
    activation,
    boolean,
    choice,
    element_names,
    instance_of,
    integer,
    list_of,
    nonneg_float,
    nonneg_int,
    number,
    optional,
    pos_float,
    pos_int,
    sel_rule,
    show,
)
from jaxmd_dp.config.fixed import Fixed, not_ours, only, same, unsupported
from jaxmd_dp.config.section import Section, entry, key_error


def _se_e2_a_type(v: Any) -> str:
    """se_e2_a's type (or its alias se_a); another name is one we do not read."""
    if v in ("se_e2_a", "se_a"):
        return "se_e2_a"
    raise Bad(f"expected one of 'se_e2_a' (alias 'se_a'), 'se_atten' (alias 'dpa1'), 'se_atten_v2', got {show(v)}")


def check_radii_and_axis(section) -> None:
    """A descriptor section's ``rcut_smth < rcut`` and ``axis_neuron <= neuron[-1]``."""
    if section.rcut_smth >= section.rcut:
        raise key_error(
            f"{section._path}.rcut_smth", f"must be smaller than rcut ({section.rcut:g}), got {section.rcut_smth:g}"
        )
    if section.axis_neuron > section.neuron[-1]:
        raise key_error(
            f"{section._path}.axis_neuron",
            f"must be <= the last embedding width neuron[-1] = {section.neuron[-1]}, got {section.axis_neuron}",
        )


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

    type: str = entry(_se_e2_a_type)
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

    @classmethod
    def _variant(cls, raw: Any) -> type:
        """The section of the descriptor type ``raw`` names: se_atten / dpa1 (:class:`SeAttenConfig`),
        se_atten_v2 (:class:`SeAttenV2Config`), else this one (se_e2_a)."""
        kind = raw.get("type") if isinstance(raw, Mapping) else None
        return {"se_atten": SeAttenConfig, "dpa1": SeAttenConfig, "se_atten_v2": SeAttenV2Config}.get(kind, cls)

    _check = check_radii_and_axis


def mixed_sel(v: Any) -> int | str:
    """se_atten's sel: one number (neighbours of any type), a list whose sum is that number (DeePMD-kit reads
    only the sum), "auto" or "auto:<factor>"."""
    if isinstance(v, str):
        return sel_rule(v)
    if isinstance(v, (list, tuple)):
        return sum(sel_rule(v))
    return pos_int(v)


def exclude_pairs(v: Any) -> tuple[tuple[int, int], ...]:
    """exclude_types: pairs [ti, tj] of type indices."""
    pairs = list_of(list_of(nonneg_int, "type indices"), "pairs of type indices", nonempty=False)(v)
    for i, p in enumerate(pairs):
        if len(p) != 2:
            raise Bad(f"entry {i}: expected a pair of type indices, got {show(list(p))}")
    return pairs


@dataclass(frozen=True, kw_only=True)
class SeAttenConfig(Section):
    """``model.descriptor`` of type "se_atten" ("dpa1" is read as "se_atten"): DPA-1, the attention-based
    descriptor with a type embedding (DeePMD-kit's ``descrpt_se_atten_args``, its keys and defaults).

    sel: neighbours of any type kept (the nearest), one number ("auto" / "auto:<factor>" resolved by the
        trainer; a list is read as its sum, as DeePMD-kit does).  rcut, rcut_smth: Å.
    neuron, axis_neuron, resnet_dt, activation_function, precision, seed, type_one_side: as se_e2_a's.
    tebd_dim: width of the type embedding.  tebd_input_mode: "concat" (s and the type embeddings into one
        embedding net) or "strip" (a separate net of the type embeddings, G = G_s·G_t + G_s);
        stripped_type_embedding (deprecated): true is "strip", false "concat".
    attn: width of the attention's hidden vectors.  attn_layer: attention layers (0: none).  attn_dotr: the
        attention weights times the neighbours' direction cosines.  attn_mask: only false (DeePMD-kit's).
    scaling_factor, temperature: the attention's logits are scaled by temperature, or (attn ·
        scaling_factor)^-1/2 without one.  normalize: q, k, v normalised to unit length.
    smooth_type_embedding: the attention weights (and with "strip" the type net's output) go smoothly to 0
        at rcut.  trainable_ln: the layer norms have a trained scale and shift.  ln_eps: their epsilon (null:
        1e-5).  concat_output_tebd: the centre atom's type embedding appended to the descriptor.
    use_tebd_bias: a bias in the type embedding's layer.  exclude_types: type pairs that do not see each
        other.  set_davg_zero: the environment-matrix mean stays zero (DeePMD-kit's default here: true).
    """

    _path = "model.descriptor"
    _aliases = {"n_axis_neuron": "axis_neuron", "smooth_type_embdding": "smooth_type_embedding"}
    _fixed = {
        "trainable": only(True),
        "env_protection": only(0.0),
        "attn_mask": only(False),
        "use_econf_tebd": only(False),
        "lmax": Fixed(lambda v: v is None or same(v, 1), "only 1 is supported", None),
    }
    _forbidden = {"type_map": "not allowed here; the type map is model.type_map"}

    type: str = entry(choice({"se_atten": "se_atten", "dpa1": "se_atten"}))
    sel: int | str = entry(mixed_sel, "auto")
    rcut: float = entry(pos_float, 6.0)
    rcut_smth: float = entry(nonneg_float, 0.5)
    neuron: tuple[int, ...] = entry(list_of(pos_int, "positive integers"), (10, 20, 40))
    axis_neuron: int = entry(pos_int, 4)
    type_one_side: bool = entry(boolean, False)
    resnet_dt: bool = entry(boolean, False)
    activation_function: str = entry(activation, "tanh")
    precision: str = entry(choice(PRECISIONS), "default")
    seed: int | None = entry(optional(integer), None)
    exclude_types: tuple[tuple[int, int], ...] = entry(exclude_pairs, ())
    attn: int = entry(pos_int, 128)
    attn_layer: int = entry(nonneg_int, 2)
    attn_dotr: bool = entry(boolean, True)
    tebd_dim: int = entry(pos_int, 8)
    tebd_input_mode: str = entry(choice(("concat", "strip")), "concat")
    stripped_type_embedding: bool | None = entry(optional(boolean), None)
    smooth_type_embedding: bool = entry(boolean, False)
    set_davg_zero: bool = entry(boolean, True)
    trainable_ln: bool = entry(boolean, True)
    ln_eps: float | None = entry(optional(pos_float), None)
    use_tebd_bias: bool = entry(boolean, False)
    scaling_factor: float = entry(pos_float, 1.0)
    normalize: bool = entry(boolean, True)
    temperature: float | None = entry(optional(number), None)
    concat_output_tebd: bool = entry(boolean, True)

    _check = check_radii_and_axis

    @property
    def input_mode(self) -> str:
        """The type embedding's way in: ``stripped_type_embedding`` when given, else ``tebd_input_mode``."""
        if self.stripped_type_embedding is None:
            return self.tebd_input_mode
        return "strip" if self.stripped_type_embedding else "concat"

    @property
    def smooth(self) -> bool:
        return self.smooth_type_embedding


@dataclass(frozen=True, kw_only=True)
class SeAttenV2Config(Section):
    """``model.descriptor`` of type "se_atten_v2": DPA-1 with the type embedding in a separate net ("strip")
    and smoothing always on (DeePMD-kit's ``descrpt_se_atten_v2_args``); the keys of :class:`SeAttenConfig`
    but ``tebd_input_mode``, ``stripped_type_embedding`` and ``smooth_type_embedding``, and set_davg_zero
    false by default."""

    _path = "model.descriptor"
    _aliases = {"n_axis_neuron": "axis_neuron"}
    _fixed = SeAttenConfig._fixed
    _forbidden = SeAttenConfig._forbidden

    type: str = entry(choice(("se_atten_v2",)))
    sel: int | str = entry(mixed_sel, "auto")
    rcut: float = entry(pos_float, 6.0)
    rcut_smth: float = entry(nonneg_float, 0.5)
    neuron: tuple[int, ...] = entry(list_of(pos_int, "positive integers"), (10, 20, 40))
    axis_neuron: int = entry(pos_int, 4)
    type_one_side: bool = entry(boolean, False)
    resnet_dt: bool = entry(boolean, False)
    activation_function: str = entry(activation, "tanh")
    precision: str = entry(choice(PRECISIONS), "default")
    seed: int | None = entry(optional(integer), None)
    exclude_types: tuple[tuple[int, int], ...] = entry(exclude_pairs, ())
    attn: int = entry(pos_int, 128)
    attn_layer: int = entry(nonneg_int, 2)
    attn_dotr: bool = entry(boolean, True)
    tebd_dim: int = entry(pos_int, 8)
    set_davg_zero: bool = entry(boolean, False)
    trainable_ln: bool = entry(boolean, True)
    ln_eps: float | None = entry(optional(pos_float), None)
    use_tebd_bias: bool = entry(boolean, False)
    scaling_factor: float = entry(pos_float, 1.0)
    normalize: bool = entry(boolean, True)
    temperature: float | None = entry(optional(number), None)
    concat_output_tebd: bool = entry(boolean, True)

    _check = SeAttenConfig._check
    input_mode = "strip"
    smooth = True


DESCRIPTOR_SECTIONS = (DescriptorConfig, SeAttenConfig, SeAttenV2Config)


def _a_descriptor(v: Any) -> Any:
    if not isinstance(v, DESCRIPTOR_SECTIONS):
        raise Bad(f"expected a descriptor section, got {show(v)}")
    return v


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
    descriptor: DescriptorConfig | SeAttenConfig | SeAttenV2Config = entry(_a_descriptor, section=DescriptorConfig)
    fitting_net: FittingNetConfig = entry(instance_of(FittingNetConfig), section=FittingNetConfig)
    data_stat_nbatch: int = entry(pos_int, 10)
    data_stat_protect: float = entry(pos_float, 0.01)

    def _check(self) -> None:
        sel = self.descriptor.sel
        if isinstance(sel, tuple) and len(sel) != len(self.type_map):
            raise key_error(
                "model.descriptor.sel",
                f"has {len(sel)} entries but model.type_map has {len(self.type_map)} types {list(self.type_map)}",
            )
