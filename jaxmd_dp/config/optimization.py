"""The ``learning_rate``, ``loss`` and ``optimizer`` sections."""

from __future__ import annotations

from dataclasses import dataclass, fields

from jaxmd_dp.config.checks import choice, nonneg_float, optional, pos_float, pos_int
from jaxmd_dp.config.fixed import only
from jaxmd_dp.config.section import Section, entry, key_error


@dataclass(frozen=True, kw_only=True)
class LearningRateConfig(Section):
    """``learning_rate``: DeePMD-kit's stepped exponential decay, lr(t) = start_lr * decay_rate ** (t // decay_steps).

    decay_rate None (default): chosen so that lr reaches stop_lr at numb_steps, as DeePMD-kit does; a number
    is used as is.  scale_by_worker: how lr scales with the number of data-parallel workers.
    """

    _path = "learning_rate"
    _fixed = {
        "stop_lr_ratio": only(None),
        "warmup_steps": only(0),
        "warmup_ratio": only(None),
        "warmup_start_factor": only(0.0),
        "smooth": only(False),
    }

    type: str = entry(choice(("exp",)), "exp")
    start_lr: float = entry(pos_float, 1e-3)
    stop_lr: float = entry(pos_float, 1e-8)
    decay_steps: int = entry(pos_int, 5000)
    decay_rate: float | None = entry(optional(pos_float), None)
    scale_by_worker: str = entry(choice(("linear", "sqrt", "none")), "linear")


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


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig(Section):
    """``optimizer``: Adam.  weight_decay is DeePMD-kit's (PyTorch Adam): an L2 term added to the gradients.
    adam_form: where ε enters — "pytorch" m̂/(√v̂ + ε), as DeePMD-kit's PyTorch and JAX backends, or
    "tensorflow" m̂/(√v̂ + ε/√(1−β₂ᵗ)), as its TensorFlow backend (tf AdamOptimizer); they differ only for
    gradients ≲ 1e-6, and only the latter follows a TensorFlow run step for step."""

    _path = "optimizer"

    type: str = entry(choice(("Adam",)), "Adam")
    adam_beta1: float = entry(nonneg_float, 0.9)
    adam_beta2: float = entry(nonneg_float, 0.999)
    weight_decay: float = entry(nonneg_float, 0.0)
    adam_form: str = entry(choice(("pytorch", "tensorflow")), "pytorch")

    def _check(self) -> None:
        for name in ("adam_beta1", "adam_beta2"):
            if getattr(self, name) >= 1.0:
                raise key_error(f"optimizer.{name}", f"must be < 1, got {getattr(self, name):g}")
