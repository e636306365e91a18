"""The ``learning_rate``, ``loss`` and ``optimizer`` sections."""

from __future__ import annotations

from dataclasses import dataclass, fields

from jaxmd_dp.config.checks import boolean, choice, interval, nonneg_float, nonneg_int, optional, pos_float, pos_int
from jaxmd_dp.config.fixed import only
from jaxmd_dp.config.section import Section, entry, key_error

LR_TYPES = ("exp", "cosine", "wsd")
WSD_DECAYS = ("inverse_linear", "cosine", "linear")
DEFAULT_STOP_LR = 5e-8  # DeePMD-kit's stop_lr when neither stop_lr nor stop_lr_ratio is given
_EXP_ONLY = {"decay_steps": 5000, "decay_rate": None, "smooth": False}
_WSD_ONLY = {"decay_phase_ratio": 0.1, "decay_type": "inverse_linear"}


@dataclass(frozen=True, kw_only=True)
class LearningRateConfig(Section):
    """``learning_rate``: DeePMD-kit's schedules, each after an optional linear warmup.

    type "exp": lr(t) = start_lr · decay_rate^⌊t / decay_steps⌋ (``smooth``: ^(t / decay_steps)), floored at
    stop_lr; decay_rate None: chosen so that lr reaches stop_lr at numb_steps, as DeePMD-kit does.
    type "cosine": from start_lr to stop_lr along half a cosine.  type "wsd": start_lr held, then over the
    last decay_phase_ratio of numb_steps down to stop_lr by ``decay_type`` (inverse_linear, cosine, linear).
    stop_lr or stop_lr_ratio (stop_lr = start_lr · ratio), not both; neither: stop_lr 5e-8 (DeePMD-kit's).
    warmup_steps or warmup_ratio (warmup_steps = int(ratio · numb_steps)): lr rises linearly from
    warmup_start_factor · start_lr to start_lr over them, then the schedule runs over the steps left.
    scale_by_worker: how lr scales with the number of data-parallel workers.
    """

    _path = "learning_rate"

    type: str = entry(choice(LR_TYPES), "exp")
    start_lr: float = entry(pos_float, 1e-3)
    stop_lr: float | None = entry(optional(pos_float), None)
    stop_lr_ratio: float | None = entry(optional(pos_float), None)
    decay_steps: int = entry(pos_int, 5000)
    decay_rate: float | None = entry(optional(interval(0.0, 1.0, lo_open=True, hi_open=False)), None)
    smooth: bool = entry(boolean, False)
    decay_phase_ratio: float = entry(interval(0.0, 1.0, lo_open=True, hi_open=False), 0.1)
    decay_type: str = entry(choice(WSD_DECAYS), "inverse_linear")
    warmup_steps: int = entry(nonneg_int, 0)
    warmup_ratio: float | None = entry(optional(interval(0.0, 1.0)), None)
    warmup_start_factor: float = entry(nonneg_float, 0.0)
    scale_by_worker: str = entry(choice(("linear", "sqrt", "none")), "linear")

    def _check(self) -> None:
        if self.stop_lr is not None and self.stop_lr_ratio is not None:
            raise key_error("learning_rate.stop_lr_ratio", "give stop_lr or stop_lr_ratio, not both")
        if self.stop_lr is None and self.stop_lr_ratio is None:
            object.__setattr__(self, "stop_lr", DEFAULT_STOP_LR)
        if self.warmup_steps and self.warmup_ratio is not None:
            raise key_error("learning_rate.warmup_ratio", "give warmup_steps or warmup_ratio, not both")
        for keys, types in ((_EXP_ONLY, ("exp",)), (_WSD_ONLY, ("wsd",))):
            for key, default in keys.items():
                if self.type not in types and getattr(self, key) != default:
                    raise key_error(f"learning_rate.{key}", f"is a key of type {types[0]!r}, not {self.type!r}")


def warmup_steps(steps: int, ratio: float | None, numb_steps: int) -> int:
    """The warmup steps of a run of ``numb_steps`` (``learning_rate.warmup_steps`` or, given,
    int(warmup_ratio · numb_steps)); DeePMD-kit's rule: fewer than numb_steps, none for 0 steps."""
    warmup = int(ratio * numb_steps) if ratio is not None else steps
    if warmup and warmup >= numb_steps:
        key = "warmup_ratio" if ratio is not None else "warmup_steps"
        raise key_error(f"learning_rate.{key}", f"gives {warmup} warmup steps, not fewer than the {numb_steps} steps")
    return warmup


_ZERO_LOSS_KEYS = (
    "start_pref_h", "limit_pref_h", "start_pref_ae", "limit_pref_ae", "start_pref_pf", "limit_pref_pf",
    "start_pref_gf", "limit_pref_gf",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LossConfig(Section):
    """``loss``: DeePMD-kit's "ener" loss; each prefactor moves from start_pref_* to limit_pref_* as lr decays.

    e: energy (per atom), f: force components, v: virial (per atom).  All >= 0.
    """

    _path = "loss"
    _fixed = {
        **{k: only(0.0) for k in _ZERO_LOSS_KEYS},
        "numb_generalized_coord": only(0),
        "use_default_pf": only(False),
        "enable_atom_ener_coeff": only(False),
        "relative_f": only(None),
        "use_huber": only(False),
        "loss_func": only("mse"),
        "f_use_norm": only(False),
        "huber_delta": only(0.01),
        "intensive_ener_virial": only(False),
    }

    type: str = entry(choice({"ener": "ener", "ener_hess": "ener"}), "ener")
    start_pref_e: float = entry(nonneg_float, 0.02)
    limit_pref_e: float = entry(nonneg_float, 1.0)
    start_pref_f: float = entry(nonneg_float, 1000.0)
    limit_pref_f: float = entry(nonneg_float, 1.0)
    start_pref_v: float = entry(nonneg_float, 0.0)
    limit_pref_v: float = entry(nonneg_float, 0.0)

    def _check(self) -> None:
        prefs = [getattr(self, f.name) for f in fields(self) if "pref" in f.name]
        if not any(prefs):
            raise key_error("loss", "every start_pref_*/limit_pref_* is 0, so there is nothing to fit")


WEIGHT_DECAY = {"Adam": 0.0, "AdamW": 0.001}  # DeePMD-kit's default weight_decay of each optimizer


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig(Section):
    """``optimizer``: Adam or AdamW (DeePMD-kit's PyTorch meanings).  weight_decay: Adam's is an L2 term
    added to the gradients (default 0); AdamW's is decoupled, −lr · weight_decay · w added to each update
    (default 0.001).  adam_form: where ε enters — "pytorch" m̂/(√v̂ + ε), as DeePMD-kit's PyTorch and JAX
    backends, or "tensorflow" m̂/(√v̂ + ε/√(1−β₂ᵗ)), as its TensorFlow backend (tf AdamOptimizer); they
    differ only for gradients ≲ 1e-6, and only the latter follows a TensorFlow run step for step."""

    _path = "optimizer"

    type: str = entry(choice(tuple(WEIGHT_DECAY)), "Adam")
    adam_beta1: float = entry(nonneg_float, 0.9)
    adam_beta2: float = entry(nonneg_float, 0.999)
    weight_decay: float | None = entry(optional(nonneg_float), None)
    adam_form: str = entry(choice(("pytorch", "tensorflow")), "pytorch")

    def _check(self) -> None:
        for name in ("adam_beta1", "adam_beta2"):
            if getattr(self, name) >= 1.0:
                raise key_error(f"optimizer.{name}", f"must be < 1, got {getattr(self, name):g}")
        if self.weight_decay is None:
            object.__setattr__(self, "weight_decay", WEIGHT_DECAY[self.type])
