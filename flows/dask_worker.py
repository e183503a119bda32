"""Preload of the LocalCluster's worker processes (``distributed`` imports it at their start).

The workers share fedcore's process group, so a Ctrl-C in the terminal reaches them too; by
default a worker then closes at once and the cells on it fail mid-round. They ignore SIGINT
instead: the sweep's stop reaches them through its Dask event (``flows.stopping``), and they
end after the round in flight as the thread runner's cells do.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Worker


def dask_setup(worker: Worker) -> None:
    """Called in the worker process's main thread before it takes tasks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
