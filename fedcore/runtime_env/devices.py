"""Device slots: each running cell holds one GPU slot, so no two cells share a GPU unless asked.

A slot is a lock file ``gpu<i>-<j>.lock`` (device ``i``, seat ``j < per_device``) held with
``flock`` for as long as the cell runs. The locks are machine-wide: threads of one process, Dask
worker processes and several Prefect workers on one machine all draw from the same slots, and the
kernel frees a slot when its holder dies (even by SIGKILL).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedcore.core.runtime.device_check import gpu_count

LOCK_DIR_ENV = "FEDCORE_DEVICE_LOCKS"


def default_lock_dir() -> Path:
    """``$FEDCORE_DEVICE_LOCKS``, else ``<tmp>/fedcore-device-locks`` (shared by the machine)."""
    return Path(
        os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "fedcore-device-locks"
    )


def needs_slot(requested: str, num_devices: int) -> bool:
    """A cell is pinned when GPUs exist and its config leaves the GPU index open."""
    return num_devices > 0 and requested in ("auto", "cuda")


class DeviceSlots:
    """``num_devices * per_device`` slots; ``acquire`` yields a free device index.

    Slots are tried seat by seat (every device's seat 0 before any seat 1), so cells spread over
    the devices before any device takes a second cell.
    """

    def __init__(
        self,
        num_devices: int,
        per_device: int = 1,
        lock_dir: str | Path | None = None,
        poll_seconds: float = 0.2,
    ) -> None:
        if num_devices < 1 or per_device < 1:
            raise ValueError("num_devices and per_device must be >= 1")
        self.num_devices = num_devices
        self.per_device = per_device
        self.lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
        self.poll_seconds = poll_seconds

    @property
    def size(self) -> int:
        return self.num_devices * self.per_device

    def _paths(self) -> list[tuple[int, Path]]:
        return [
            (device, self.lock_dir / f"gpu{device}-{seat}.lock")
            for seat in range(self.per_device)
            for device in range(self.num_devices)
        ]

    def _try_lock(self) -> tuple[int, int] | None:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        for device, path in self._paths():
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return device, fd
        return None

    @contextmanager
    def acquire(self, timeout: float | None = None) -> Iterator[int]:
        """Hold one slot until the block exits; waits (polling) while every slot is taken."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (got := self._try_lock()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no free device slot in {self.lock_dir} after {timeout} s")
            time.sleep(self.poll_seconds)
        device, fd = got
        try:
            yield device
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextmanager
def pinned_device(
    requested: str,
    per_device: int = 1,
    num_devices: int | None = None,
    lock_dir: str | Path | None = None,
) -> Iterator[str | None]:
    """Yield ``cuda:i`` held for this cell, or None when the config's device stands as it is."""
    n = gpu_count() if num_devices is None else num_devices
    if not needs_slot(requested, n):
        yield None
        return
    with DeviceSlots(n, per_device, lock_dir).acquire() as index:
        yield f"cuda:{index}"
