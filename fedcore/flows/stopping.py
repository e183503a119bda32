"""A flow's graceful stop: SIGTERM (a terminal, Slurm, Kubernetes, a deployment's cancellation)
lets the tasks in flight finish their round, and the flow run ends Cancelled; cells on Dask
workers learn of the stop through a Dask event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
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


DASK_POLL_S = 0.5  # the longest a cell trains on after its sweep's stop before it asks again


def watch_dask_event(name: str | None) -> AbstractContextManager[None]:
    """In a task on a Dask worker: the Dask event ``name`` being set also requests a stop (the
    round loop asks the scheduler at most every ``DASK_POLL_S``: each question is a round trip
    of about 0.7 ms of CPU, where a CRAFT-protocol cell's round is 3 ms); no event (thread
    runner): nothing to watch."""
    if name is None:
        return nullcontext()
    from distributed import Event

    return stopping.also_when(at_most_every(DASK_POLL_S, Event(name).is_set),
                              "the sweep's stop request")


def at_most_every(seconds: float, check: Callable[[], bool],
                  clock: Callable[[], float] = time.monotonic) -> Callable[[], bool]:
    """``check``, asked on the first call and then only once ``seconds`` have passed since it
    was last asked (False in between); once True, True for good."""
    asked_at: float | None = None
    seen = False

    def throttled() -> bool:
        nonlocal asked_at, seen
        now = clock()
        if not seen and (asked_at is None or now - asked_at >= seconds):
            asked_at, seen = now, check()
        return seen

    return throttled


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
