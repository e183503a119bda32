"""A flow's graceful stop: SIGTERM (a terminal, Slurm, Kubernetes, a deployment's cancellation)
lets the tasks in flight finish their round, and the flow run ends Cancelled; cells on Dask
workers learn of the stop through a Dask event."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from prefect.states import Cancelled

from fedcore.core.runtime import stopping

if TYPE_CHECKING:
    from prefect import State


def hold_sigterm() -> None:
    """Called first in a flow: SIGTERM requests a stop (``fedcore.core.runtime.stopping``)
    instead of Prefect's crash of the flow run while its task threads keep training."""
    stopping.hold_sigterm()


def stopped_state(what: str) -> State[Any]:
    """The Cancelled state a stopped flow or task returns (``what``: e.g. ``sweep kill``)."""
    return Cancelled(message=f"{what} stopped by {stopping.signal_name()}")


def watch_dask_event(name: str | None) -> AbstractContextManager[None]:
    """In a task on a Dask worker: the Dask event ``name`` being set also requests a stop (the
    round loop polls it once a round); no event (thread runner): nothing to watch."""
    if name is None:
        return nullcontext()
    from distributed import Event

    return stopping.also_when(Event(name).is_set, "the sweep's stop request")


@contextmanager
def relay_stop_to_dask(task_runner: Any, name: str | None) -> Iterator[None]:
    """While the block runs, a stop requested in this process (the flow's) sets the Dask event
    ``name`` on ``task_runner``'s cluster, which the cells on its workers watch."""
    if name is None:
        yield
        return
    done = threading.Event()

    def relay() -> None:
        while not done.is_set():
            if stopping.wait(0.5):
                from distributed import Event

                Event(name, client=task_runner.client).set()
                return

    thread = threading.Thread(target=relay, name="fedcore-stop-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
