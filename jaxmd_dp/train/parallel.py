"""Who trains: this process alone, or one of several data-parallel workers.

A :class:`Workers` tells the trainer its rank and world size, whether it writes files, how to average
gradients across workers (``grad_reduce``, used inside the jitted step) and how to broadcast host data
from rank 0. :func:`local_workers` is the single-process case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Workers:
    rank: int = 0
    size: int = 1
    grad_reduce: Callable | None = None  # grads → mean over workers (traceable), None when alone
    broadcast: Callable[[Any], Any] = field(default=lambda x: x)  # host pytree from rank 0 to all
    description: str = "single process"

    @property
    def is_writer(self) -> bool:
        return self.rank == 0


def local_workers() -> Workers:
    """This process alone."""
    return Workers()
