"""A claim on one config while a sweep cell runs it, so that two sweeps of one file started
together run each cell once: the second waits for the claim, then finds the cell FINISHED and
skips it.

A claim is an exclusive ``flock`` on ``<hash>.lock`` in ``<database>.cells/`` next to a SQLite
store (shared by every process and machine that opens that file), else in
``<tmp>/fedcore-cell-claims/<store>/`` (shared by the processes of this machine). The kernel
releases it when its holder exits or dies, SIGKILL included, so a dead holder never blocks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fedcore.core.runtime import stopping

POLL_S = 0.2  # how often a waiting cell tries again (and checks for a stop)


def claim_dir(tracking_uri: str) -> Path:
    """Where the claims of the cells recorded in ``tracking_uri`` are."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri.removeprefix("sqlite:///") + ".cells")
    store = hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "fedcore-cell-claims" / store


class CellClaim:
    """A held claim; ``release`` (idempotent, from any thread) gives it up."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # closing the descriptor releases the flock
                self._fd = None


def try_claim(config_hash: str, tracking_uri: str) -> CellClaim | None:
    """The claim on ``config_hash``, or None when another holder (thread or process) has it."""
    folder = claim_dir(tracking_uri)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{config_hash}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return CellClaim(fd)


def claim_cell(config_hash: str, tracking_uri: str,
               on_wait: Callable[[], None] | None = None) -> CellClaim:
    """Wait for the claim on ``config_hash`` (``on_wait`` is called once if it must wait).

    Raises ``StopRequested`` if a stop is requested while
    waiting.
    """
    waited = False
    while True:
        claim = try_claim(config_hash, tracking_uri)
        if claim is not None:
            return claim
        if not waited and on_wait is not None:
            on_wait()
        waited = True
        stopping.check(0)
        time.sleep(POLL_S)
