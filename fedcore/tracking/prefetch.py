"""The imports a run's end needs, done by a background thread while the run trains.

A tracked run ends by drawing its figures (matplotlib) and writing its per-client table as
Parquet (pandas, pyarrow): about a second of imports that the first run of a process would pay
after its last round. :func:`prefetch` imports them in a thread started with the run, while the
training (torch, which releases the interpreter lock in its kernels) goes on; the run's end then
finds them imported, or waits for the import in flight. Nothing is recorded by the thread: a
module that fails to import here fails again, and is reported, where the run's end imports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from importlib import import_module

log = logging.getLogger("fedcore")

FIGURES = ("matplotlib.figure", "matplotlib.ticker", "matplotlib.backends.backend_agg",
           "PIL.PngImagePlugin")
TABLES = ("pandas", "pyarrow.parquet")


def end_modules(figures: bool) -> tuple[str, ...]:
    """What a run's end imports: its per-client table's and, with ``figures``, its figures'."""
    return (*TABLES, *(FIGURES if figures else ()))


def prefetch(modules: Iterable[str]) -> threading.Thread:
    """Import ``modules`` in a background (daemon) thread; returns the started thread."""
    thread = threading.Thread(target=_import_all, args=(tuple(modules),),
                              name="fedcore-prefetch", daemon=True)
    thread.start()
    return thread


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            import_module(name)
        except Exception:  # noqa: BLE001  (the run's end imports it again and reports it)
            log.debug("prefetch of %s failed", name, exc_info=True)
