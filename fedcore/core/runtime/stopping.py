"""Graceful stop on SIGTERM / SIGINT: the process finishes the round in flight, then stops.

The first signal only sets a process-wide flag; the round loop checks it at every round
boundary and raises ``StopRequested``, whose ``run_status`` (KILLED) the tracker records.
Sweeps and studies start no new cell or trial once it is set. A second signal exits at once
(exit code 128 + signal number, as a shell reports a process ended by that signal).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_STOP = threading.Event()
_received: list[int] = []  # the signals received, in order
_local = threading.local()  # this thread's extra stop check (also_when)


class StopRequested(BaseException):
    """The run stopped at a round boundary because a stop was requested.

    A BaseException, like KeyboardInterrupt: handlers of ordinary failures (task retries, a
    failed Optuna trial) do not swallow it.
    """

    run_status = "KILLED"


def requested() -> bool:
    """Whether a stop was requested: a signal, ``request``, or (in this thread) the check of
    an enclosing ``also_when``."""
    if _STOP.is_set():
        return True
    check = getattr(_local, "check", None)
    return check is not None and check()


@contextmanager
def also_when(check: Callable[[], bool], reason: str) -> Iterator[None]:
    """Inside the block, in this thread, ``check()`` returning True also requests a stop, for
    ``reason`` (a sweep cell on a Dask worker polls its sweep's stop event: the signal went to
    the flow's process, not to the worker's)."""
    previous = getattr(_local, "check", None), getattr(_local, "reason", None)
    _local.check, _local.reason = check, reason
    try:
        yield
    finally:
        _local.check, _local.reason = previous


def wait(timeout: float | None = None) -> bool:
    """Block until a stop is requested in this process (or ``timeout`` passed); whether it was."""
    return _STOP.wait(timeout)


def request(signum: int = signal.SIGTERM) -> None:
    """Ask the process to stop at the next round boundary (what the first signal does)."""
    _received.append(signum)
    _STOP.set()


def signal_name() -> str:
    """The first signal received, e.g. ``SIGTERM``; else the reason of an enclosing
    ``also_when``."""
    if _received:
        return signal.Signals(_received[0]).name
    return getattr(_local, "reason", None) or "a stop request"


def exit_code() -> int:
    """128 + the first signal's number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + (_received[0] if _received else signal.SIGTERM)


def check(round: int) -> None:
    """Raise ``StopRequested`` when a stop was requested (``round``: the last one done)."""
    if requested():
        raise StopRequested(f"stopped by {signal_name()} after round {round}")


def _handle(signum: int, frame: FrameType | None) -> None:
    if _STOP.is_set():  # a second signal: no more waiting
        os.write(2, f"\nfedcore: second {signal.Signals(signum).name}, exiting now\n".encode())
        os._exit(128 + signum)
    request(signum)
    os.write(2, f"\nfedcore: {signal.Signals(signum).name} received, stopping after the "
                "current round (send it again to exit at once)\n".encode())


@contextmanager
def installed() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as above inside the block (main thread only; elsewhere the
    handlers stay as they are); the previous handlers are back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _handle) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def hold_sigterm() -> None:
    """Handle SIGTERM here (main thread only) although a framework replaced the handler: Prefect's
    flow engine installs its own for the flow's duration (and restores the previous one after),
    which would end the flow while its tasks' threads train on."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handle)
