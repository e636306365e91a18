"""The whole config: its five sections (:class:`Config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jaxmd_dp.config.checks import instance_of
from jaxmd_dp.config.fixed import Fixed
from jaxmd_dp.config.model import ModelConfig
from jaxmd_dp.config.optimization import LearningRateConfig, LossConfig, OptimizerConfig, warmup_steps
from jaxmd_dp.config.section import Section, entry
from jaxmd_dp.config.training import TrainingConfig, TrainingDataConfig, ValidationDataConfig


def _validating_off(v: Any) -> bool:
    return v is None or (isinstance(v, Mapping) and not v.get("full_validation") and not v.get("ema_full_validation"))


def _nvnmd_off(v: Any) -> bool:
    return v is None or (isinstance(v, Mapping) and not v.get("enable"))


@dataclass(frozen=True, kw_only=True)
class Config(Section):
    """A whole, validated config.  ``to_dict()`` gives the resolved dict written to ``out.json``."""

    _path = ""
    _fixed = {
        "validating": Fixed(
            _validating_off, "full validation is not supported (only {} or full_validation: false)", {}
        ),
        "nvnmd": Fixed(_nvnmd_off, "NVNMD is not supported (only {} or enable: false)", {}),
    }

    model: ModelConfig = entry(instance_of(ModelConfig), section=ModelConfig)
    learning_rate: LearningRateConfig = entry(
        instance_of(LearningRateConfig), factory=LearningRateConfig, section=LearningRateConfig
    )
    loss: LossConfig = entry(instance_of(LossConfig), factory=LossConfig, section=LossConfig)
    optimizer: OptimizerConfig = entry(instance_of(OptimizerConfig), factory=OptimizerConfig, section=OptimizerConfig)
    training: TrainingConfig = entry(instance_of(TrainingConfig), section=TrainingConfig)

    def _check(self) -> None:
        lr = self.learning_rate
        if self.training.numb_steps is not None:  # else known once the data gives numb_epoch's steps
            warmup_steps(lr.warmup_steps, lr.warmup_ratio, self.training.numb_steps)


DATA_SECTIONS = (TrainingDataConfig, ValidationDataConfig)
SYSTEMS_KEYS = {("training", "training_data", "systems"), ("training", "validation_data", "systems")}
