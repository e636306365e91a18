"""The one configuration schema of jaxmd_dp: our YAML files and DeePMD-kit ``input.json`` / ``out.json``.

A config is five sections, with DeePMD-kit's key names and defaults (DeePMD-kit 3.x ``deepmd/utils/argcheck.py``)::

    model:          type_map, descriptor (se_e2_a), fitting_net (ener), data statistics
    learning_rate:  exponential decay (type "exp")
    loss:           energy / force / virial prefactors (type "ener")
    optimizer:      Adam (optional section)
    training:       training_data, validation_data, numb_steps, seeds, output files and frequencies

Units follow DeePMD-kit: lengths (``rcut``, ``rcut_smth``) in Å, energies in eV, forces in eV/Å.

Reading
    :func:`load_config` reads ``.yaml`` / ``.yml`` (YAML 1.2 style scalars: ``1e-3`` is a float, only
    ``true``/``false`` are booleans, so an element named ``No`` stays a string) or ``.json``, applies
    ``key.path=value`` overrides, then validates.  :func:`config_from_dict` validates a dict already in
    memory.  Every problem a user can fix raises :class:`~jaxmd_dp.errors.InputError` with one line that
    names the dotted key (and the file, when there is one).

What DeePMD-kit accepts and we do too
    * keys starting with ``_`` anywhere (``_comment``, ``_comment1``...) are dropped, as DeePMD-kit does;
    * DeePMD-kit's key aliases (``n_axis_neuron``, ``n_neuron``, ``numb_step``/``num_steps``/``stop_batch``,
      ``auto_prob_style``, ``sys_weights``, ``numb_batch``) are renamed to the canonical key, and the
      descriptor type ``se_a`` to ``se_e2_a``;
    * every key DeePMD-kit writes into ``out.json`` is known: the ones that would change results are accepted
      only at their default (anything else is an error saying so), the ones that only tune DeePMD-kit
      itself (profiling, checkpoint directories, torch.compile, ...) are type-checked and ignored.

The result is a tree of frozen, keyword-only dataclasses.  Lists are stored as tuples, so a
:class:`Config` is hashable and ``==`` compares values.  Construction validates (``__post_init__``), so
``dataclasses.replace(cfg.training, numb_steps=10)`` is checked like a file.  :meth:`Config.to_dict` gives
the fully resolved dict (every default filled, data paths resolved) that :func:`config_from_dict` accepts
again.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import yaml

from jaxmd_dp.errors import InputError

__all__ = [
    "Config",
    "DescriptorConfig",
    "FittingNetConfig",
    "LearningRateConfig",
    "LossConfig",
    "ModelConfig",
    "OptimizerConfig",
    "TrainingConfig",
    "TrainingDataConfig",
    "ValidationDataConfig",
    "config_from_dict",
    "load_config",
]

ACTIVATIONS = ("tanh", "gelu", "gelu_tf", "relu", "relu6", "softplus", "sigmoid", "linear", "none")
PRECISIONS = ("default", "float64", "float32", "bfloat16")  # "default" = DeePMD-kit's interface precision, float64
KERNELS = ("auto", "pallas", "jnp")
TABLE_MIN_NODES, TABLE_MAX_NODES = 16, 1024  # training.embedding_table: nodes of each embedding net's table


# ============================================================================ value checkers
class _Bad(Exception):
    """A bad value; whoever catches it adds the key (and the file)."""


def _show(v: Any) -> str:
    """A value as the user wrote it (JSON spelling), cut to a readable length."""
    if isinstance(v, str):
        s = repr(v)
    else:
        try:
            s = json.dumps(v, default=str)
        except (TypeError, ValueError):
            s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(f"expected an integer, got {_show(v)}")
    return v


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"expected a number, got {_show(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise _Bad(f"expected a finite number, got {_show(v)}")
    return x


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"expected true or false, got {_show(v)}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _Bad(f"expected a non-empty string, got {_show(v)}")
    return v


def _above(check: Callable[[Any], Any], lo: float, strict: bool = True) -> Callable[[Any], Any]:
    def checked(v: Any) -> Any:
        x = check(v)
        if x < lo or (strict and x == lo):
            raise _Bad(f"must be {'>' if strict else '>='} {lo:g}, got {_show(v)}")
        return x

    return checked


_pos_int = _above(_int, 0)
_nonneg_int = _above(_int, 0, strict=False)
_pos_float = _above(_float, 0.0)
_nonneg_float = _above(_float, 0.0, strict=False)


def _table_nodes(v: Any) -> int:
    n = _int(v)
    if n != 0 and not TABLE_MIN_NODES <= n <= TABLE_MAX_NODES:
        raise _Bad(f"expected 0 (off) or a node count from {TABLE_MIN_NODES} to {TABLE_MAX_NODES}, got {_show(v)}")
    return n


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def checked(v: Any) -> Any:
        return None if v is None else check(v)

    return checked


def _list_of(check: Callable[[Any], Any], what: str, nonempty: bool = True) -> Callable[[Any], tuple]:
    def checked(v: Any) -> tuple:
        if not isinstance(v, (list, tuple)):
            raise _Bad(f"expected a list of {what}, got {_show(v)}")
        if nonempty and not v:
            raise _Bad(f"expected a non-empty list of {what}, got []")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(check(x))
            except _Bad as e:
                raise _Bad(f"entry {i}: {e}") from None
        return tuple(out)

    return checked


def _choice(options: Sequence[str] | Mapping[str, str]) -> Callable[[Any], str]:
    """One of ``options``; a mapping renames aliases to their canonical value."""
    mapping = dict(options) if isinstance(options, Mapping) else {o: o for o in options}

    canonical = sorted(set(mapping.values()))
    if len(canonical) == 1:
        aliases = [a for a in mapping if a != canonical[0]]
        also = f" (or its alias {', '.join(map(repr, aliases))})" if aliases else ""
        expected = f"only {canonical[0]!r}{also} is supported"
    else:
        expected = f"expected one of {', '.join(map(repr, mapping))}"

    def checked(v: Any) -> str:
        if isinstance(v, str) and v in mapping:
            return mapping[v]
        raise _Bad(f"{expected}, got {_show(v)}")

    return checked


def _activation(v: Any) -> str:
    if isinstance(v, str) and v.lower() in ACTIVATIONS:  # DeePMD-kit accepts "None" as well as "none"
        return v.lower()
    raise _Bad(f"expected one of {', '.join(map(repr, ACTIVATIONS))}, got {_show(v)}")


def _type_map(v: Any) -> tuple[str, ...]:
    names = _list_of(_str, "element names")(v)
    seen = set()
    for name in names:
        if name in seen:
            raise _Bad(f"element {name!r} appears twice")
        seen.add(name)
    return names


def _sel(v: Any) -> tuple[int, ...] | str:
    """A list of positive ints (one per type), "auto" or "auto:<factor>" (factor >= 1), kept as given."""
    if isinstance(v, str):
        if v == "auto":
            return v
        if v.startswith("auto:"):
            try:
                factor = float(v[5:])
            except ValueError:
                factor = math.nan
            if math.isfinite(factor) and factor >= 1.0:
                return v
        raise _Bad(f'expected a list of positive integers, "auto" or "auto:<factor>" with factor >= 1, got {_show(v)}')
    return _list_of(_pos_int, "positive integers (one per type)")(v)


def _systems(v: Any) -> tuple[str, ...] | str:
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, str):
        return _str(v)
    return _list_of(lambda p: _str(os.fspath(p) if isinstance(p, os.PathLike) else p), "paths")(v)


def _batch_size(v: Any) -> int | tuple[int, ...] | str:
    """int > 0; list of ints > 0 (one per system); "auto", "auto:N" or "max:N" (N atoms, > 0)."""
    if isinstance(v, str):
        rule, _, n = v.partition(":")
        if (rule == "auto" and not n) or (rule in ("auto", "max") and n.isdigit() and int(n) > 0):
            return v
        raise _Bad(f'expected a positive integer, a list of them, "auto", "auto:N" or "max:N", got {_show(v)}')
    if isinstance(v, (list, tuple)):
        return _list_of(_pos_int, "positive integers (one per system)")(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(f'expected a positive integer, a list of them, "auto", "auto:N" or "max:N", got {_show(v)}')
    return _pos_int(v)


def _auto_prob(v: Any) -> str:
    """"prob_uniform", "prob_sys_size" or "prob_sys_size;stt:end:weight;..." (blocks of systems)."""
    if v in ("prob_uniform", "prob_sys_size"):
        return v
    if isinstance(v, str) and v.startswith("prob_sys_size;"):
        blocks = [b for b in v.split(";")[1:] if b.strip()]
        for b in blocks:
            parts = b.split(":")
            try:
                stt, end, w = int(parts[0]), int(parts[1]), float(parts[2])
                ok = len(parts) == 3 and 0 <= stt < end and math.isfinite(w) and w >= 0
            except (ValueError, IndexError):
                ok = False
            if not ok:
                raise _Bad(f"block {b!r} is not stt:end:weight with 0 <= stt < end and weight >= 0")
        if blocks:
            return v
    raise _Bad(f"expected 'prob_uniform', 'prob_sys_size' or 'prob_sys_size;stt:end:weight;...', got {_show(v)}")


def _is(cls: type) -> Callable[[Any], Any]:
    def checked(v: Any) -> Any:
        if not isinstance(v, cls):
            raise _Bad(f"expected a {cls.__name__}, got {_show(v)}")
        return v

    return checked


# ============================================================================ keys accepted at one value only
@dataclass(frozen=True)
class _Fixed:
    """A DeePMD-kit key we accept only where ``ok(value)``; otherwise the error says ``msg``."""

    ok: Callable[[Any], bool]
    msg: str


def _same(v: Any, d: Any) -> bool:
    if d is None:
        return v is None
    if isinstance(d, bool):
        return v is d
    if isinstance(d, (int, float)):
        return not isinstance(v, bool) and isinstance(v, (int, float)) and v == d
    if isinstance(d, (list, tuple)):
        return isinstance(v, (list, tuple)) and list(v) == list(d)
    if isinstance(d, dict):
        return isinstance(v, Mapping) and dict(v) == d
    return v == d


def _only(default: Any) -> _Fixed:
    """Accepted only at ``default`` (``None`` also covers the key being absent)."""
    return _Fixed(lambda v: _same(v, default), f"only {_show(default)} is supported")


def _unsupported(what: str) -> _Fixed:
    """A DeePMD-kit feature we do not have: only absent or null is accepted."""
    return _Fixed(lambda v: v is None, f"{what} is not supported by jaxmd_dp (only null)")


# ============================================================================ the schema
def _field(
    check: Callable[[Any], Any],
    default: Any = MISSING,
    *,
    factory: Any = MISSING,
    section: type | None = None,
    nullable: bool = False,
) -> Any:
    metadata = {"check": check, "section": section, "nullable": nullable}
    return field(default=default, default_factory=factory, metadata=metadata)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key_error(key: str, msg: str) -> InputError:
    return InputError(f"config key '{key}': {msg}")


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in fields(v)}
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return v


class _Section:
    """Base of every section: field checks on construction, then cross-field checks (``_check``).

    Class attributes read by the parser: ``_path`` (dotted key of the section), ``_aliases`` (DeePMD-kit
    alias -> canonical key), ``_fixed`` (keys accepted only at one value, not stored), ``_ignored`` (keys
    type-checked then dropped), ``_forbidden`` (key -> message).
    """

    _path: ClassVar[str] = ""
    _aliases: ClassVar[dict[str, str]] = {}
    _fixed: ClassVar[dict[str, _Fixed]] = {}
    _ignored: ClassVar[dict[str, Callable[[Any], Any]]] = {}
    _forbidden: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            try:
                value = f.metadata["check"](getattr(self, f.name))
            except _Bad as e:
                raise _key_error(_join(self._path, f.name), str(e)) from None
            object.__setattr__(self, f.name, value)
        self._check()

    def _check(self) -> None:
        """Checks across fields; raise :class:`InputError` naming the key."""

    def to_dict(self) -> dict[str, Any]:
        """This section as plain dicts/lists (JSON-serialisable), every default filled."""
        return _plain(self)


@dataclass(frozen=True, kw_only=True)
class DescriptorConfig(_Section):
    """``model.descriptor``: the se_e2_a (DeepPot-SE, two-body embedding, full relative coordinates) descriptor.

    type: "se_e2_a" ("se_a" is read as "se_e2_a").
    sel: max neighbours kept per neighbour type, tuple of ints (one per type); or "auto" / "auto:<factor>",
        kept as given for the trainer to resolve from the data (DeePMD-kit: factor x max count, rounded up to 4).
    rcut: cut-off radius, Å.  rcut_smth: where the 1/r smoothing starts, Å (0 <= rcut_smth < rcut).
    neuron: embedding-net widths.  axis_neuron: M2, columns of G kept for D (<= neuron[-1]).
    type_one_side: true -> one embedding net per neighbour type; false -> one per (centre, neighbour) pair.
    resnet_dt: a trainable "timestep" on skip connections.  activation_function: one of ``ACTIVATIONS``.
    precision: one of ``PRECISIONS``.  seed: initialisation seed or None.
    set_davg_zero: keep the env-matrix mean at zero.
    """

    _path = "model.descriptor"
    _aliases = {"n_axis_neuron": "axis_neuron"}
    _fixed = {"trainable": _only(True), "exclude_types": _only([]), "env_protection": _only(0.0)}
    _forbidden = {"type_map": "not allowed here; the type map is model.type_map"}

    type: str = _field(_choice({"se_e2_a": "se_e2_a", "se_a": "se_e2_a"}))
    sel: tuple[int, ...] | str = _field(_sel, "auto")
    rcut: float = _field(_pos_float, 6.0)
    rcut_smth: float = _field(_nonneg_float, 0.5)
    neuron: tuple[int, ...] = _field(_list_of(_pos_int, "positive integers"), (10, 20, 40))
    axis_neuron: int = _field(_pos_int, 4)
    type_one_side: bool = _field(_bool, False)
    resnet_dt: bool = _field(_bool, False)
    activation_function: str = _field(_activation, "tanh")
    precision: str = _field(_choice(PRECISIONS), "default")
    seed: int | None = _field(_optional(_int), None)
    set_davg_zero: bool = _field(_bool, False)

    def _check(self) -> None:
        if self.rcut_smth >= self.rcut:
            raise _key_error(
                f"{self._path}.rcut_smth", f"must be smaller than rcut ({self.rcut:g}), got {self.rcut_smth:g}"
            )
        if self.axis_neuron > self.neuron[-1]:
            raise _key_error(
                f"{self._path}.axis_neuron",
                f"must be <= the last embedding width neuron[-1] = {self.neuron[-1]}, got {self.axis_neuron}",
            )


def _all_true(v: Any) -> bool:
    return v is True or (isinstance(v, (list, tuple)) and bool(v) and all(x is True for x in v))


@dataclass(frozen=True, kw_only=True)
class FittingNetConfig(_Section):
    """``model.fitting_net``: the energy fitting net (one per atom type), descriptor -> atomic energy (eV).

    type: "ener".  neuron: hidden widths.  resnet_dt: trainable timestep on skip connections.
    activation_function, precision, seed: as in :class:`DescriptorConfig`.
    """

    _path = "model.fitting_net"
    _aliases = {"n_neuron": "neuron"}
    _fixed = {
        "numb_fparam": _only(0),
        "numb_aparam": _only(0),
        "default_fparam": _only(None),
        "dim_case_embd": _only(0),
        "rcond": _only(None),
        "atom_ener": _only([]),
        "use_aparam_as_mask": _only(False),
        "layer_name": _unsupported("layer_name (parameter sharing)"),
        "trainable": _Fixed(_all_true, "only true is supported"),
    }

    type: str = _field(_choice(("ener",)), "ener")
    neuron: tuple[int, ...] = _field(_list_of(_pos_int, "positive integers"), (120, 120, 120))
    resnet_dt: bool = _field(_bool, True)
    activation_function: str = _field(_activation, "tanh")
    precision: str = _field(_choice(PRECISIONS), "default")
    seed: int | None = _field(_optional(_int), None)


def _bridging_off(v: Any) -> bool:
    return isinstance(v, str) and v.lower() == "none"


@dataclass(frozen=True, kw_only=True)
class ModelConfig(_Section):
    """``model``: element names, descriptor, fitting net and data-statistics settings.

    type_map: element name of each type index (unique).
    data_stat_nbatch: frames per system sampled for the env-matrix statistics (davg/dstd) and energy bias.
    data_stat_protect: floor of the env-matrix standard deviation.
    data_bias_nsample: frames per system used when DeePMD-kit changes the energy bias.
    """

    _path = "model"
    _fixed = {
        "type": _only("standard"),
        "pair_exclude_types": _only([]),
        "atom_exclude_types": _only([]),
        "preset_out_bias": _only(None),
        "srtab_add_bias": _only(True),
        "model_branch_alias": _only([]),
        "info": _only({}),
        "bridging_method": _Fixed(_bridging_off, "only 'None' is supported"),
        "use_srtab": _unsupported("use_srtab (tabulated short-range pair potential)"),
        "smin_alpha": _unsupported("smin_alpha"),
        "sw_rmin": _unsupported("sw_rmin"),
        "sw_rmax": _unsupported("sw_rmax"),
        "type_embedding": _unsupported("type_embedding"),
        "modifier": _unsupported("modifier"),
        "compress": _unsupported("compress"),
        "spin": _unsupported("spin"),
        "finetune_head": _unsupported("finetune_head"),
    }
    _ignored = {"bridging_r_inner": _float, "bridging_r_outer": _float}  # only used when bridging is on

    type_map: tuple[str, ...] = _field(_type_map)
    descriptor: DescriptorConfig = _field(_is(DescriptorConfig), section=DescriptorConfig)
    fitting_net: FittingNetConfig = _field(_is(FittingNetConfig), section=FittingNetConfig)
    data_stat_nbatch: int = _field(_pos_int, 10)
    data_stat_protect: float = _field(_pos_float, 0.01)
    data_bias_nsample: int = _field(_pos_int, 10)

    def _check(self) -> None:
        sel = self.descriptor.sel
        if not isinstance(sel, str) and len(sel) != len(self.type_map):
            raise _key_error(
                "model.descriptor.sel",
                f"has {len(sel)} entries but model.type_map has {len(self.type_map)} types {list(self.type_map)}",
            )


@dataclass(frozen=True, kw_only=True)
class LearningRateConfig(_Section):
    """``learning_rate``: DeePMD-kit's stepped exponential decay, lr(t) = start_lr * decay_rate ** (t // decay_steps).

    decay_rate None (default): chosen so that lr reaches stop_lr at numb_steps, as DeePMD-kit does; a number
    is used as is.  scale_by_worker: how lr scales with the number of data-parallel workers.
    """

    _path = "learning_rate"
    _fixed = {
        "stop_lr_ratio": _only(None),
        "warmup_steps": _only(0),
        "warmup_ratio": _only(None),
        "warmup_start_factor": _only(0.0),
        "smooth": _only(False),
    }

    type: str = _field(_choice(("exp",)), "exp")
    start_lr: float = _field(_pos_float, 1e-3)
    stop_lr: float = _field(_pos_float, 1e-8)
    decay_steps: int = _field(_pos_int, 5000)
    decay_rate: float | None = _field(_optional(_pos_float), None)
    scale_by_worker: str = _field(_choice(("linear", "sqrt", "none")), "linear")


_ZERO_LOSS_KEYS = (
    "start_pref_h", "limit_pref_h", "start_pref_ae", "limit_pref_ae", "start_pref_pf", "limit_pref_pf",
    "start_pref_gf", "limit_pref_gf",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LossConfig(_Section):
    """``loss``: DeePMD-kit's "ener" loss; each prefactor moves from start_pref_* to limit_pref_* as lr decays.

    e: energy (per atom), f: force components, v: virial (per atom).  All >= 0.
    """

    _path = "loss"
    _fixed = {
        **{k: _only(0.0) for k in _ZERO_LOSS_KEYS},
        "numb_generalized_coord": _only(0),
        "use_default_pf": _only(False),
        "enable_atom_ener_coeff": _only(False),
        "relative_f": _only(None),
        "use_huber": _only(False),
        "loss_func": _only("mse"),
        "f_use_norm": _only(False),
        "huber_delta": _only(0.01),
        "intensive_ener_virial": _only(False),
    }

    type: str = _field(_choice({"ener": "ener", "ener_hess": "ener"}), "ener")
    start_pref_e: float = _field(_nonneg_float, 0.02)
    limit_pref_e: float = _field(_nonneg_float, 1.0)
    start_pref_f: float = _field(_nonneg_float, 1000.0)
    limit_pref_f: float = _field(_nonneg_float, 1.0)
    start_pref_v: float = _field(_nonneg_float, 0.0)
    limit_pref_v: float = _field(_nonneg_float, 0.0)

    def _check(self) -> None:
        prefs = [getattr(self, f.name) for f in fields(self) if "pref" in f.name]
        if not any(prefs):
            raise _key_error("loss", "every start_pref_*/limit_pref_* is 0, so there is nothing to fit")


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig(_Section):
    """``optimizer``: Adam.  weight_decay is DeePMD-kit's (PyTorch Adam): an L2 term added to the gradients.
    adam_form: where ε enters — "pytorch" m̂/(√v̂ + ε), as DeePMD-kit's PyTorch and JAX backends, or
    "tensorflow" m̂/(√v̂ + ε/√(1−β₂ᵗ)), as its TensorFlow backend (tf AdamOptimizer); they differ only for
    gradients ≲ 1e-6, and only the latter follows a TensorFlow run step for step."""

    _path = "optimizer"

    type: str = _field(_choice(("Adam",)), "Adam")
    adam_beta1: float = _field(_nonneg_float, 0.9)
    adam_beta2: float = _field(_nonneg_float, 0.999)
    weight_decay: float = _field(_nonneg_float, 0.0)
    adam_form: str = _field(_choice(("pytorch", "tensorflow")), "pytorch")

    def _check(self) -> None:
        for name in ("adam_beta1", "adam_beta2"):
            if getattr(self, name) >= 1.0:
                raise _key_error(f"optimizer.{name}", f"must be < 1, got {getattr(self, name):g}")


def _check_per_system(path: str, systems: tuple[str, ...] | str, key: str, value: Any) -> None:
    if isinstance(systems, tuple) and isinstance(value, tuple) and len(value) != len(systems):
        raise _key_error(f"{path}.{key}", f"has {len(value)} entries but {path}.systems lists {len(systems)} systems")


class _DataSection(_Section):
    _aliases = {"auto_prob_style": "auto_prob", "sys_weights": "sys_probs"}

    def _check(self) -> None:
        _check_per_system(self._path, self.systems, "batch_size", self.batch_size)  # type: ignore[attr-defined]
        _check_per_system(self._path, self.systems, "sys_probs", self.sys_probs)  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True)
class TrainingDataConfig(_DataSection):
    """``training.training_data``.

    systems: DeePMD-kit npy system directories (tuple of str), or one str (a system or a directory searched
        for systems); relative paths are resolved against the config file's directory.
    batch_size: int, tuple of ints (one per system), "auto" / "auto:N" (smallest bs with bs * natoms >= N,
        N = 32) or "max:N".
    auto_prob: how systems are drawn: "prob_sys_size", "prob_uniform" or "prob_sys_size;stt:end:weight;...".
    sys_probs: explicit per-system weights (win over auto_prob) or None.
    set_prefix: prefix of the frame-set directories (DeePMD-kit: "set").
    rglob_patterns: glob patterns used to find systems under a directory, or None.
    min_pair_dist: frames with any pair closer than this (Å) are left out; 0 = off.
    """

    _path = "training.training_data"

    systems: tuple[str, ...] | str = _field(_systems)
    batch_size: int | tuple[int, ...] | str = _field(_batch_size, "auto")
    auto_prob: str = _field(_auto_prob, "prob_sys_size")
    sys_probs: tuple[float, ...] | None = _field(_optional(_list_of(_float, "numbers")), None)
    set_prefix: str = _field(_str, "set")
    rglob_patterns: tuple[str, ...] | None = _field(_optional(_list_of(_str, "glob patterns")), None)
    min_pair_dist: float = _field(_nonneg_float, 0.0)


@dataclass(frozen=True, kw_only=True)
class ValidationDataConfig(_DataSection):
    """``training.validation_data``: like :class:`TrainingDataConfig`; numb_btch batches are drawn per display."""

    _path = "training.validation_data"
    _aliases = {**_DataSection._aliases, "numb_batch": "numb_btch"}

    systems: tuple[str, ...] | str = _field(_systems)
    batch_size: int | tuple[int, ...] | str = _field(_batch_size, "auto")
    numb_btch: int = _field(_pos_int, 1)
    auto_prob: str = _field(_auto_prob, "prob_sys_size")
    sys_probs: tuple[float, ...] | None = _field(_optional(_list_of(_float, "numbers")), None)
    set_prefix: str = _field(_str, "set")
    rglob_patterns: tuple[str, ...] | None = _field(_optional(_list_of(_str, "glob patterns")), None)


def _no_gradient_clipping(v: Any) -> bool:
    return v is None or _same(v, 0.0)


@dataclass(frozen=True, kw_only=True)
class TrainingConfig(_Section):
    """``training``: data, length, seeds and outputs.

    numb_steps: optimiser steps (>= 0).  seed: data-sampling seed or None.
    disp_file / disp_freq: learning-curve file and period (steps).  save_ckpt / save_freq / max_ckpt_keep:
    checkpoint prefix, period and how many to keep.  tensorboard*: TensorBoard output.
    strict_sel (jaxmd_dp): error, instead of a warning, when an atom has more neighbours than sel.
    kernels (jaxmd_dp): "auto" (Pallas on GPU, jnp elsewhere), "pallas" or "jnp".
    pair_packing (jaxmd_dp): run the embedding nets on real neighbour pairs only when the data leaves
    enough sel slots empty, and hold only the neighbour slots the data fills (same results;
    :mod:`jaxmd_dp.model.pair_pack`); false: on every slot.
    pair_sharing (jaxmd_dp): with pair_packing, run the embedding nets once per pair of same-type atoms,
    whose two slots hold the same s (:mod:`jaxmd_dp.geometry.pair_partner`; same results to rounding);
    applies with type_one_side, DeePMD's per-type statistics, no atom over sel and batches small enough for
    its partner search (else it is off, logged).
    embedding_table (jaxmd_dp): 0 (default) runs the embedding nets on every pair; N from 16 to 1024 trains
    with them tabulated on N nodes per step (DeePMD-kit's model compression, used while training; quintic
    interpolation; the trained model is exact; :mod:`jaxmd_dp.model.embed_table`). 64 is a good value:
    the step's cost grows with N, the interpolation error falls as N⁻⁶.
    neighbor_cache_mb (jaxmd_dp): device memory (MiB) for the training frames and their neighbour lists,
    the frames copied to the device once, each list built the first time its frame is drawn and kept
    across epochs, for at most numb_steps × batch size frames (:mod:`jaxmd_dp.train.neighbor_cache`; same
    results), and as much again for the validation frames of merged batches (other validation batches have
    their lists built in the evaluation step); 0: batches copied from the host and their lists built in
    every step.
    merge_batches (jaxmd_dp): when the systems give batches of several shapes (atom counts × batch sizes),
    lay each batch's frames end to end in one padded list of atoms, so the training and evaluation steps
    compile once instead of once per shape (:mod:`jaxmd_dp.train.merge`; same results); false: one
    compile per shape, no padding.
    """

    _path = "training"
    _aliases = {"stop_batch": "numb_steps", "num_step": "numb_steps", "num_steps": "numb_steps",
                "numb_step": "numb_steps", "num_epochs": "numb_epoch", "num_epoch": "numb_epoch",
                "numb_epochs": "numb_epoch"}  # fmt: skip
    _fixed = {
        "numb_epoch": _Fixed(lambda v: v is None, "not supported (give training.numb_steps instead)"),
        "enable_ema": _only(False),
        "change_bias_after_training": _only(False),
        "acc_freq": _only(1),
        "gradient_max_norm": _Fixed(_no_gradient_clipping, "gradient clipping is not supported (only null or 0)"),
        "mixed_precision": _unsupported("mixed_precision (use model precision keys)"),
    }
    _ignored = {  # only tune DeePMD-kit itself
        "profiling": _bool,
        "profiling_file": _str,
        "enable_profiler": _bool,
        "stat_file": _optional(_str),
        "stat_file_mode": _choice(("read", "update")),
        "save_dir": _optional(_str),
        "ckpt_keep_ratio": _optional(_pos_float),
        "ema_decay": _float,
        "ema_ckpt_keep": _optional(_pos_int),
        "disp_avg": _bool,
        "zero_stage": _nonneg_int,
        "neighbor_graph_method": _choice(("auto", "dense", "nv")),
        "enable_compile": _bool,
        "enable_tf32": _bool,
        "numb_test": _nonneg_int,
    }
    _forbidden = {
        "systems": "DeePMD-kit v1 layout; put it in training.training_data.systems",
        "batch_size": "DeePMD-kit v1 layout; put it in training.training_data.batch_size",
    }

    training_data: TrainingDataConfig = _field(_is(TrainingDataConfig), section=TrainingDataConfig)
    validation_data: ValidationDataConfig | None = _field(
        _optional(_is(ValidationDataConfig)), None, section=ValidationDataConfig, nullable=True
    )
    numb_steps: int = _field(_nonneg_int)
    seed: int | None = _field(_optional(_int), None)
    disp_file: str = _field(_str, "lcurve.out")
    disp_freq: int = _field(_pos_int, 1000)
    save_freq: int = _field(_pos_int, 1000)
    save_ckpt: str = _field(_str, "model.ckpt")
    max_ckpt_keep: int = _field(_pos_int, 5)
    disp_training: bool = _field(_bool, True)
    time_training: bool = _field(_bool, True)
    tensorboard: bool = _field(_bool, False)
    tensorboard_log_dir: str = _field(_str, "log")
    tensorboard_freq: int = _field(_pos_int, 1)
    strict_sel: bool = _field(_bool, False)
    kernels: str = _field(_choice(KERNELS), "auto")
    pair_packing: bool = _field(_bool, True)
    pair_sharing: bool = _field(_bool, True)
    embedding_table: int = _field(_table_nodes, 0)
    neighbor_cache_mb: int = _field(_nonneg_int, 2048)
    merge_batches: bool = _field(_bool, True)


def _validating_off(v: Any) -> bool:
    return v is None or (isinstance(v, Mapping) and not v.get("full_validation") and not v.get("ema_full_validation"))


def _nvnmd_off(v: Any) -> bool:
    return v is None or (isinstance(v, Mapping) and not v.get("enable"))


@dataclass(frozen=True, kw_only=True)
class Config(_Section):
    """A whole, validated config.  ``to_dict()`` gives the resolved dict written to ``out.json``."""

    _path = ""
    _fixed = {
        "validating": _Fixed(_validating_off, "full validation is not supported (only {} or full_validation: false)"),
        "nvnmd": _Fixed(_nvnmd_off, "NVNMD is not supported (only {} or enable: false)"),
    }

    model: ModelConfig = _field(_is(ModelConfig), section=ModelConfig)
    learning_rate: LearningRateConfig = _field(
        _is(LearningRateConfig), factory=LearningRateConfig, section=LearningRateConfig
    )
    loss: LossConfig = _field(_is(LossConfig), factory=LossConfig, section=LossConfig)
    optimizer: OptimizerConfig = _field(_is(OptimizerConfig), factory=OptimizerConfig, section=OptimizerConfig)
    training: TrainingConfig = _field(_is(TrainingConfig), section=TrainingConfig)


_DATA_SECTIONS = (TrainingDataConfig, ValidationDataConfig)
_SYSTEMS_KEYS = {("training", "training_data", "systems"), ("training", "validation_data", "systems")}


# ============================================================================ dict -> Config
def _fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in fields(cls)}


def _subsections(cls: type, path: str = "") -> list[tuple[str, type]]:
    """Every section below (and including) ``cls`` with its dotted path."""
    out = [(path, cls)]
    for f in fields(cls):
        if f.metadata.get("section") is not None:
            out += _subsections(f.metadata["section"], _join(path, f.name))
    return out


def _known_keys(cls: Any) -> list[str]:
    return [*_fields_of(cls), *cls._fixed, *cls._ignored, *cls._forbidden, *cls._aliases]


def _unknown(cls: Any, path: str, key: str) -> InputError:
    full = _join(path, key)
    close = difflib.get_close_matches(key, _known_keys(cls), n=1, cutoff=0.6)
    if close:
        suggestion = _join(path, cls._aliases.get(close[0], close[0]))
        return InputError(f"config key '{full}' is not known; did you mean '{suggestion}'?")
    elsewhere = [_join(p, key) for p, c in _subsections(Config) if p != path and key in _known_keys(c)]
    if elsewhere:
        return InputError(f"config key '{full}' is not known; did you mean '{elsewhere[0]}'?")
    return InputError(f"config key '{full}' is not known (known keys here: {', '.join(_fields_of(cls))})")


def _canonical(cls: Any, raw: Any, path: str) -> Any:
    """A copy of ``raw`` with DeePMD-kit's alias keys renamed, section by section."""
    if not isinstance(raw, Mapping):
        return raw
    known = _fields_of(cls)
    out: dict[Any, Any] = {}
    for key, value in raw.items():
        ckey = cls._aliases.get(key, key) if isinstance(key, str) else key
        if ckey in out or (ckey != key and ckey in raw):
            raise InputError(
                f"config key '{_join(path, key)}' is another name for '{_join(path, ckey)}', which is also given"
            )
        f = known.get(ckey)
        if f is not None and f.metadata["section"] is not None:
            value = _canonical(f.metadata["section"], value, _join(path, ckey))
        out[ckey] = value
    return out


def _resolve(p: str, base_dir: str | None) -> str:
    if base_dir is None or os.path.isabs(p):
        return p
    return os.path.normpath(os.path.join(base_dir, p))


def _parse(cls: Any, raw: Any, path: str, base_dir: str | None) -> Any:
    if not isinstance(raw, Mapping):
        if not path:
            what = "empty" if raw is None else f"a {type(raw).__name__}, not a mapping of sections"
            raise InputError(f"the config is {what}")
        raise _key_error(path, f"expected a mapping, got {_show(raw)}")
    known = _fields_of(cls)
    if "type" in known and "type" in raw:  # an unsupported type first, before its keys look unknown
        try:
            known["type"].metadata["check"](raw["type"])
        except _Bad as e:
            raise _key_error(_join(path, "type"), str(e)) from None
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise _key_error(_join(path, str(key)), "keys must be strings")
        if key.startswith("_"):  # _comment... (DeePMD-kit drops every key starting with "_")
            continue
        full = _join(path, key)
        if key in known:
            section = known[key].metadata["section"]
            if section is None:
                kwargs[key] = value
            elif value is None and known[key].metadata["nullable"]:
                kwargs[key] = None
            elif value is None and known[key].default_factory is not MISSING:
                continue  # a null optional section: all defaults
            else:
                kwargs[key] = _parse(section, value, full, base_dir)
        elif key in cls._fixed:
            fixed = cls._fixed[key]
            if not fixed.ok(value):
                raise _key_error(full, f"{fixed.msg}, got {_show(value)}")
        elif key in cls._ignored:
            try:
                cls._ignored[key](value)
            except _Bad as e:
                raise _key_error(full, str(e)) from None
        elif key in cls._forbidden:
            raise _key_error(full, cls._forbidden[key])
        else:
            raise _unknown(cls, path, key)
    for name, f in known.items():
        if name not in kwargs and f.default is MISSING and f.default_factory is MISSING:
            raise InputError(f"config key '{_join(path, name)}' is required but missing")
    if cls in _DATA_SECTIONS:
        systems = kwargs["systems"]
        if isinstance(systems, str):
            kwargs["systems"] = _resolve(systems, base_dir)
        elif isinstance(systems, (list, tuple)):
            kwargs["systems"] = [_resolve(s, base_dir) if isinstance(s, str) else s for s in systems]
    return cls(**kwargs)


# ============================================================================ overrides
def _override_path(parts: list[str], text: str) -> list[str]:
    """Canonical key path of an override; unknown keys are errors, like in a file."""
    cls: Any = Config
    canon: list[str] = []
    for i, part in enumerate(parts):
        if part.startswith("_"):
            return canon + parts[i:]
        part = cls._aliases.get(part, part)
        known = _fields_of(cls)
        if part in known:
            canon.append(part)
            section = known[part].metadata["section"]
            if section is None:
                if i < len(parts) - 1:
                    raise InputError(f"config key '{'.'.join(canon)}' is a value, not a section (override {text!r})")
                return canon
            cls = section
        elif part in cls._fixed or part in cls._ignored or part in cls._forbidden:
            return canon + [part] + parts[i + 1 :]  # its value is judged when the config is validated
        else:
            raise InputError(f"{_unknown(cls, '.'.join(canon), part)} (override {text!r})")
    return canon


def _apply_override(raw: dict[str, Any], text: str) -> None:
    """Set ``a.b.c=value`` (value parsed as YAML) in ``raw``, creating sections on the way."""
    key, sep, value_text = text.partition("=")
    parts = key.strip().split(".")
    if not sep or any(not p for p in parts):
        raise InputError(f"override {text!r}: expected KEY=VALUE, e.g. training.numb_steps=2000")
    try:
        value = yaml.load(value_text, Loader=_YamlLoader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"override {text!r}: cannot parse the value: {problem}") from None
    parts = _override_path(parts, text)
    if tuple(parts) in _SYSTEMS_KEYS:  # typed on a command line: relative to the working directory
        cwd = os.getcwd()
        if isinstance(value, str):
            value = _resolve(value, cwd)
        elif isinstance(value, list):
            value = [_resolve(v, cwd) if isinstance(v, str) else v for v in value]
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, Mapping):
            raise InputError(f"override {text!r}: config key '{'.'.join(parts[: i + 1])}' is not a mapping")
        node[part] = child = dict(child)
        node = child
    node[parts[-1]] = value


# ============================================================================ files
class _YamlLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core scalars (``1e-3`` float, decimal ints, only true/false booleans) and
    an error on duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


_YAML_CORE = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML_CORE]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"  # 1, 1.5, .5, 1e-3, 1.0E+2
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node)))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise InputError(f"config file {path}: unknown extension {path.suffix!r}; expected .json, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"cannot read config file {path}: {reason}") from None
    if suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise InputError(f"cannot parse config file {path}: line {e.lineno}, column {e.colno}: {e.msg}") from None
        except ValueError as e:
            raise InputError(f"cannot parse config file {path}: {e}") from None
    try:
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"cannot parse config file {path}: {where}{problem}") from None


# ============================================================================ public API
def _build(raw: Any, base_dir: str | None, overrides: Sequence[str]) -> Config:
    if not isinstance(raw, Mapping):
        return _parse(Config, raw, "", base_dir)  # raises the top-level message
    raw = _canonical(Config, raw, "")
    for text in overrides:
        _apply_override(raw, text)
    return _parse(Config, raw, "", base_dir)


def config_from_dict(d: Mapping[str, Any], base_dir: str | os.PathLike | None = None) -> Config:
    """Validate a config dict (our keys or DeePMD-kit's) into a :class:`Config`.

    base_dir: directory that relative data-system paths are resolved against; None keeps them as given.
    Raises :class:`InputError` naming the first bad key.
    """
    return _build(d, None if base_dir is None else os.path.abspath(base_dir), ())


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> Config:
    """Read a ``.yaml``/``.yml``/``.json`` config, apply ``overrides``, validate.

    overrides: ``"dotted.key=value"`` strings, the value parsed as YAML (``training.numb_steps=2000``,
    ``model.descriptor.sel=[46,92]``, ``training.validation_data=null``); applied in order before validation;
    an unknown key is an error.  Relative data-system paths in the file are resolved against the file's
    directory; relative paths given in an override (``training.training_data.systems=...``) against the
    current working directory.  Errors name the file.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    p = Path(path)
    raw = _read(p)
    try:
        return _build(raw, os.path.dirname(os.path.abspath(p)), overrides)
    except InputError as e:
        raise InputError(f"{e} ({p})") from None
