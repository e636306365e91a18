"""Training: loss, schedules, the jitted step, checkpoints, learning curve, the Trainer and its callbacks."""

from jaxmd_dp.train.callbacks import Callback, Window
from jaxmd_dp.train.loop import Trainer, train_and_evaluate

__all__ = ["Callback", "Trainer", "Window", "train_and_evaluate"]
