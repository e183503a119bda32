"""Preload of the LocalCluster's worker processes (``distributed`` imports it at their start).

The workers share fedcore's process group, so a Ctrl-C in the terminal reaches them too; by
default a worker then closes at once and the cells on it fail mid-round. They ignore SIGINT
instead: the sweep's stop reaches them through its Dask event (``fedcore.flows.stopping``), and they
end after the round in flight as the thread runner's cells do.

At the end of a sweep a worker has to exit within the nanny's 4 seconds, else it is killed
(a warning, and tracebacks of the connections it had open). Its exit used to be spent in the
interpreter's finalisation: the last garbage collection and the teardown of torch's, MLflow's
and Prefect's modules (over 4 s on a busy 2-core machine). ``dask_teardown`` writes what
is left and ends the process without them.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Worker


def dask_setup(worker: Worker) -> None:
    """Called in the worker process's main thread before it takes tasks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from prefect.logging.configuration import ensure_logging_setup

    from fedcore.flows.console import quiet_console

    ensure_logging_setup()  # Prefect's console handler, set up now (later only updated)
    quiet_console()  # then quieted: a cell's "Finished in state Completed()" stays off it
    # what a cell imports (torch, Prefect's flows, MLflow's store: about 6 s of CPU), now: a
    # cluster started ahead of its sweep (fedcore.flows.runners.start_cluster_early) does it
    # while the flow's process starts the Prefect server and the flow
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    import fedcore.flows.sweep  # noqa: F401


def dask_teardown(worker: Worker) -> None:
    """Called when the worker closes: its runs' ends are written; then, once the worker's own
    shutdown is done, the process ends at once (``_exit_now``)."""
    import atexit
    import gc

    from fedcore.tracking.writers import wait_for_runs

    wait_for_runs()
    gc.freeze()  # if the process still finalises: no last collection over every object
    atexit.register(_exit_now)  # registered last: runs first among the exit handlers


def _exit_now() -> None:
    """Send Prefect's queued logs and events, flush the output, and end the process without
    the interpreter's finalisation (module teardown of torch, MLflow, Prefect: seconds on a
    busy machine, past the nanny's patience). The cells' runs are already FINISHED."""
    import os
    import sys

    try:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        for queue in (APILogWorker, EventsWorker):
            queue.drain_all(timeout=2)
    except Exception:  # noqa: BLE001  (nothing to send, or no server: exit all the same)
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)
