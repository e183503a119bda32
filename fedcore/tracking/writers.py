"""The process's background MLflow writers: metric batches and the end of runs, in order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Writers:
    """The process's two background MLflow writers, started on first use.

    ``metrics``: every tracker's metric batches, in order (one thread). ``finish``: the end of
    a run (summary metrics, per-client table, figures, FINISHED) when the caller does not wait
    for it. Both finish their queued work before the interpreter exits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._finishing: set[Future[None]] = set()

    def submit(self, pool: str, fn: Callable[..., None], *args: Any) -> Future[None]:
        """Run ``fn(*args)`` on the writer ``pool`` (started on first use), after its queue."""
        with self._lock:
            if pool not in self._pools:
                self._pools[pool] = ThreadPoolExecutor(1, thread_name_prefix=f"fedcore-{pool}")
            future = self._pools[pool].submit(fn, *args)
            if pool == "finish":
                self._finishing.add(future)
                future.add_done_callback(self._finishing.discard)
        return future

    def wait_finishing(self) -> None:
        """Block until every run handed to the ``finish`` writer is finished."""
        with self._lock:
            pending = list(self._finishing)
        for future in pending:
            future.exception()


WRITERS = Writers()


def wait_for_runs() -> None:
    """Wait until the runs whose end was left to the background (``finish_in_background``)
    are FINISHED, with their artifacts."""
    WRITERS.wait_finishing()
