"""A quiet console for a sweep that succeeds: the lines a user needs (progress, warnings,
errors), not every library's INFO log.

Filtered from the terminal only (Prefect's API handler still sends them to the Prefect UI):
INFO lines of Dask (``distributed.*``: cluster start, every connection opened and closed),
of Prefect's Dask task runner, and Prefect's per-task ``Finished in state Completed()`` (the
sweep prints a progress line per cell instead).
"""

from __future__ import annotations

import logging
import sys

QUIET = ("distributed", "prefect.task_runner.dask", "prefect.task_runs")


class BelowWarning(logging.Filter):
    """Drops records under WARNING from the loggers in ``QUIET`` (and their children)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return not any(record.name == n or record.name.startswith(f"{n}.") for n in QUIET)


def quiet_console() -> None:
    """Add ``BelowWarning`` to the root logger's handlers that write to the terminal
    (once)."""
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    for handler in logging.getLogger().handlers:
        if getattr(handler, "stream", None) in consoles and not any(
            isinstance(f, BelowWarning) for f in handler.filters
        ):
            handler.addFilter(BelowWarning())
