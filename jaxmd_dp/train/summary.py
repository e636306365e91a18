"""The model summary printed when training starts (parameters per net and FLOPs per training step), and
the run's outcome printed when it ends (the best checkpoint, an early stop).

FLOPs come from XLA's cost analysis of the compiled training step (``jax.stages.Compiled.cost_analysis``,
after optimisation: matmuls, element-wise work and transcendental functions of one step for one batch
layout, and the bytes its fused kernels read and write). The trainer asks for them after the first
step, when jax has the step's lowering and executable cached: no compilation (an analysis of the
unoptimised lowering instead lengthened every start).
"""

from __future__ import annotations

import jax
import numpy as np


def param_counts(params) -> dict[str, int]:
    """Number of learned parameters of each net: {"descriptor/embed_0": n, ..., "fitting/fit_1": n}."""
    counts: dict[str, int] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        keys = [getattr(k, "key", str(k)) for k in path]
        net = "/".join(keys[:2]) if len(keys) > 2 else "/".join(keys[:-1]) or keys[0]
        counts[net] = counts.get(net, 0) + int(np.prod(np.shape(leaf)))
    return counts


def step_cost(train_step, *args) -> dict[str, float]:
    """XLA's estimate for one call of the jitted ``train_step(*args)``: {"flops", "bytes accessed",
    "transcendentals"} (missing keys: not reported by the backend)."""
    ca = train_step.lower(*args).compile().cost_analysis()
    if isinstance(ca, (list, tuple)):  # older jax: one dict per device program
        ca = ca[0] if ca else {}
    return {k: float(ca[k]) for k in ("flops", "bytes accessed", "transcendentals") if ca and k in ca}


def format_summary(counts: dict[str, int]) -> str:
    """The parameter block as text lines."""
    width = max([len(k) for k in counts] + [5])
    lines = ["model summary:", f"  {'net':<{width}}  {'parameters':>12}"]
    lines += [f"  {k:<{width}}  {v:>12,d}" for k, v in counts.items()]
    lines.append(f"  {'total':<{width}}  {sum(counts.values()):>12,d}")
    return "\n".join(lines)


def format_cost(cost: dict[str, float], natoms: int, batch_size: int) -> str:
    """One line: FLOPs (and bytes) of one training step, from :func:`step_cost`."""
    flops = cost["flops"]
    return (
        f"  training step ({batch_size} frame(s) x {natoms} atoms): {flops / 1e9:.3g} GFLOP"
        + (f", {cost['bytes accessed'] / 1e9:.3g} GB accessed" if "bytes accessed" in cost else "")
        + f" (XLA cost analysis; {flops / max(1, natoms * batch_size) / 1e6:.3g} MFLOP per atom)"
    )


def format_outcome(summary: dict) -> list[str]:
    """The lines on how the run ended, from the dict ``Trainer.fit`` returns: the lowest validation loss
    and its checkpoint (``training.keep_best``), the step of an early stop (``training.early_stop``)."""
    lines = []
    best = summary.get("best")
    if best:
        lines.append(
            f"lowest validation loss {best['valid_loss']:.6g} at step {best['step']}: checkpoint {best['checkpoint']}"
        )
    early = summary.get("stopped_early")
    if early:
        loss = early["best_loss"]  # None off rank 0, which judges
        than = f" than {loss:.6g} at step {early['best_step']}" if loss is not None else ""
        lines.append(
            f"early stop at step {early['step']}: {early['patience']} learning-curve lines without a lower "
            f"validation loss{than}"
        )
    return lines
