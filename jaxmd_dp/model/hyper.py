"""The energy model's hyper-parameters: element names, a descriptor and the fitting nets, with no defaults of
their own (DeePMD-kit's defaults are the config's, :mod:`jaxmd_dp.config`).

Built from the validated config (:meth:`ModelHyper.from_config`), from a DeePMD-kit ``model`` section
(:meth:`ModelHyper.from_deepmd`, validated through the config) or from the ``hyper`` dict of a model file or
checkpoint (:meth:`ModelHyper.from_dict`). That dict is flat: ``type_map``, ``descriptor`` (the type; absent
in older files, which are se_e2_a), the descriptor's own keys and the fitting net's ``fit_*`` keys.

``DESCRIPTORS`` is the registry of descriptors by DeePMD-kit type name and alias
(:mod:`jaxmd_dp.model.descriptor` says how to add one).
"""

from __future__ import annotations

import dataclasses

from jaxmd_dp.config import model_config_from_dict
from jaxmd_dp.model.descriptor import Descriptor, registry
from jaxmd_dp.model.fitting import FittingHyper
from jaxmd_dp.model.fitting_mixed import MixedFittingHyper
from jaxmd_dp.model.se_atten import SeAtten, SeAttenV2
from jaxmd_dp.model.se_e2_a import SeE2A

DESCRIPTORS: dict[str, type[Descriptor]] = registry(SeE2A, SeAtten, SeAttenV2)


def descriptor_class(type_name: str) -> type[Descriptor]:
    """The descriptor class of a DeePMD-kit ``model.descriptor.type`` (or alias); ValueError if unknown."""
    try:
        return DESCRIPTORS[type_name]
    except (KeyError, TypeError):
        raise ValueError(f"descriptor type {type_name!r} is not one of {sorted(DESCRIPTORS)}") from None


def fitting_class(descriptor: type[Descriptor] | Descriptor) -> type:
    """The energy fitting of a descriptor: one net per type, or one for all with ``mixed_types``."""
    return MixedFittingHyper if descriptor.mixed_types else FittingHyper


@dataclasses.dataclass(frozen=True)
class ModelHyper:
    """Static hyper-parameters of an energy model (hashable).

    type_map: element name of each type; descriptor: a :class:`~jaxmd_dp.model.descriptor.Descriptor`
    (e.g. :class:`~jaxmd_dp.model.se_e2_a.SeE2A`); fitting: the fitting nets'
    (:class:`~jaxmd_dp.model.fitting.FittingHyper`, or with a descriptor of mixed types the one net of
    :class:`~jaxmd_dp.model.fitting_mixed.MixedFittingHyper`). ``sel``, ``nnei``, ``rcut``, ``rcut_smth`` are the
    descriptor's neighbour-list needs; its other hyper-parameters read through (``hyper.type_one_side``
    is ``hyper.descriptor.type_one_side``).
    """

    type_map: tuple[str, ...]
    descriptor: Descriptor
    fitting: FittingHyper | MixedFittingHyper

    def __post_init__(self):
        if not isinstance(self.fitting, fitting_class(self.descriptor)):
            raise ValueError(
                f"descriptor {self.descriptor.type_name} takes a {fitting_class(self.descriptor).__name__}"
            )
        if self.descriptor.mixed_types:
            if len(self.descriptor.nlist_sel) != 1:
                raise ValueError(f"descriptor {self.descriptor.type_name}: sel is one number of any type's neighbours")
        elif len(self.descriptor.nlist_sel) != len(self.type_map):
            raise ValueError(
                f"descriptor sel has {len(self.descriptor.nlist_sel)} entries for "
                f"{len(self.type_map)} types {list(self.type_map)}"
            )

    def __getattr__(self, name: str):
        # only called for names that are not attributes: the descriptor's hyper-parameters
        if name.startswith("__") or name in ("type_map", "descriptor", "fitting"):
            raise AttributeError(name)
        return getattr(self.descriptor, name)

    @property
    def ntypes(self) -> int:
        return len(self.type_map)

    @property
    def sel(self) -> tuple[int, ...]:
        """Slots of each neighbour-type section of the neighbour list."""
        return self.descriptor.nlist_sel

    @property
    def nnei(self) -> int:
        return self.descriptor.nnei

    @property
    def rcut(self) -> float:
        return self.descriptor.rcut

    @property
    def rcut_smth(self) -> float:
        return self.descriptor.rcut_smth

    @property
    def dim_descriptor(self) -> int:
        return self.descriptor.dim_out

    # ------------------------------------------------------------------ building
    @classmethod
    def from_config(cls, model, sel: tuple[int, ...] | None = None) -> ModelHyper:
        """From a validated :class:`jaxmd_dp.config.ModelConfig`. ``sel``: the resolved sel when the
        config's is "auto" (ValueError when it is and none is given)."""
        descriptor = descriptor_class(model.descriptor.type).from_config(model.descriptor, sel)
        return cls(tuple(model.type_map), descriptor, fitting_class(descriptor).from_config(model.fitting_net))

    @classmethod
    def from_deepmd(cls, model: dict) -> ModelHyper:
        """From the ``model`` section of a DeePMD-kit input.json / out.json (or ``ModelConfig.to_dict()``),
        validated by the config, so absent keys take DeePMD-kit's defaults. ``descriptor.sel`` must be a
        list (ValueError otherwise, as for "auto"); a bad key raises :class:`~jaxmd_dp.errors.InputError`."""
        return cls.from_config(model_config_from_dict(model))

    @classmethod
    def from_dict(cls, d: dict) -> ModelHyper:
        """From the flat ``hyper`` dict of a model file or checkpoint (:meth:`to_dict`). Every key must be
        known and every field present: ValueError / KeyError otherwise."""
        descriptor = descriptor_class(d.get("descriptor", "se_e2_a"))
        fitting = fitting_class(descriptor)
        unknown = sorted(set(d) - {"type_map", *descriptor.keys(), *fitting.keys()})
        if unknown:
            raise ValueError(f"unknown model hyper-parameters {unknown}")
        return cls(tuple(d["type_map"]), descriptor.from_dict(d), fitting.from_dict(d))

    def to_dict(self) -> dict:
        """The flat ``hyper`` dict of model files (JSON-ready)."""
        return {"type_map": list(self.type_map), **self.descriptor.to_dict(), **self.fitting.to_dict()}

    def replace(self, **changes) -> ModelHyper:
        """A copy with entries of the flat ``hyper`` dict changed (:meth:`to_dict`'s keys), e.g.
        ``hyper.replace(precision="float32", fit_precision="float32")``."""
        return ModelHyper.from_dict({**self.to_dict(), **changes})

    # ------------------------------------------------------------------ DeePMD-kit's names
    def deepmd_param_path(self, key: str) -> tuple[str, ...] | None:
        """The path in ``params`` of a DeePMD-kit state-dict key (after ``atomic_model.``), or None."""
        return self.descriptor.deepmd_param_path(key) or self.fitting.deepmd_param_path(key)
