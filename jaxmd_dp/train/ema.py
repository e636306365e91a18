"""The exponential moving average (EMA) of the weights (``training.enable_ema``), as DeePMD-kit keeps it.

After every optimiser step, each weight's average moves towards the weight:

    ema ← ema + (1 − ema_decay) · (w − ema)

computed as ``torch.lerp`` does (DeePMD-kit's ``ModelEMA.update``): ema + α (w − ema) for α = 1 − ema_decay
< 0.5, else w − (w − ema)(1 − α). The average starts from the weights the run starts from (a restart's
from its checkpoint's average). The training state carries it (:class:`jaxmd_dp.train.step.TrainState`),
the checkpoints keep it, and each checkpoint step also saves it as weights alone in the EMA directory
(:func:`ema_checkpoint_dir`), which ``test`` and ``freeze`` read like any checkpoint directory.
"""

from __future__ import annotations

from pathlib import Path

import jax


def ema_update(ema, params, decay: float):
    """The average ``ema`` (a tree shaped as ``params``) moved towards ``params`` by 1 − ``decay``."""
    alpha = 1.0 - decay
    if alpha < 0.5:
        return jax.tree_util.tree_map(lambda e, p: e + alpha * (p - e), ema, params)
    return jax.tree_util.tree_map(lambda e, p: p - (p - e) * (1.0 - alpha), ema, params)


def ema_checkpoint_dir(save_ckpt: str | Path) -> Path:
    """DeePMD-kit's EMA checkpoint prefix: ``_ema`` before the last suffix (``model.ckpt`` →
    ``model_ema.ckpt``, ``ckpt/model`` → ``ckpt/model_ema``)."""
    path = Path(save_ckpt)
    if path.suffix:
        return path.with_name(f"{path.stem}_ema{path.suffix}")
    return path.with_name(f"{path.name}_ema")
