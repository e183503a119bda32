"""A sweep's progress, one line per finished cell: ``[3/12] finished <run name> | 3/12
[00:41<01:50, 13.7s/cell]`` (n/N, elapsed, remaining time and rate, tqdm's meter).

A line per cell, not a redrawn bar: it goes through the flow's log, so it reads the same in a
terminal, a log file and the Prefect UI of a deployment."""

from __future__ import annotations

import time

BAR_FORMAT = "{elapsed} elapsed, ETA {remaining}, {rate_fmt}"


class Progress:
    """Counts finished cells of ``total`` from the moment it is made."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.start = time.monotonic()

    def line(self, status: str, name: str) -> str:
        """The line for one more finished cell (any status)."""
        from tqdm import tqdm

        self.done += 1
        elapsed = time.monotonic() - self.start
        meter = tqdm.format_meter(self.done, self.total, elapsed, unit="cell",
                                  bar_format=BAR_FORMAT)
        width = len(str(self.total))
        return f"[{self.done:>{width}}/{self.total}] {status} {name} | {meter.strip()}"
