"""Training: loss, schedules, the jitted step, checkpoints, learning curve, and the Trainer."""

from jaxmd_dp.train.loop import Trainer, train_and_evaluate

__all__ = ["Trainer", "train_and_evaluate"]
