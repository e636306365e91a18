"""The next training batch prepared on a thread while the current step runs.

Preparing a batch (:meth:`jaxmd_dp.train.loop.Trainer.prepare`) builds the neighbour lists of frames
not yet in the cache and merges frames into one list of atoms: small jitted programs. XLA's CPU client
runs the programs that one thread dispatches one after the other, so dispatched from the training
loop they wait for the step before them and the step waits for them. Dispatched from a second thread
they run beside the step, on the share of the cores the step leaves idle.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable


class BatchesAhead:
    """One worker thread that prepares batches: ``submit(batch)`` → a future of (batch, arrays, layout).

    prepare: batch → (arrays, layout). Batches are prepared in the order submitted (one thread), so
    whatever ``prepare`` keeps (the neighbour cache) is filled in draw order, as without the thread.
    name: the thread's name prefix.
    """

    def __init__(self, prepare: Callable, name: str = "batch-ahead"):
        self._prepare = prepare
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)

    def submit(self, batch: dict) -> concurrent.futures.Future:
        return self._pool.submit(lambda: (batch, *self._prepare(batch)))

    def close(self, wait: bool = True) -> None:
        """Stop the thread once the submitted batches are prepared; ``wait``: return only then (else
        at once, the futures still complete)."""
        self._pool.shutdown(wait=wait, cancel_futures=wait)
