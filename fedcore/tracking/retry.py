"""Retry MLflow calls that fail because a shared SQLite store is locked by another writer.

MLflow sets ``PRAGMA busy_timeout`` but SQLite still answers "database is locked" at once when
two transactions both want to upgrade to a writer; the failed transaction was rolled back, so
running the call again is safe.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("fedcore")

T = TypeVar("T")
LOCKED = ("database is locked", "database table is locked", "database schema is locked")


def is_locked(exc: BaseException) -> bool:
    """True for a SQLite lock error, raw (sqlalchemy/sqlite3) or wrapped in MlflowException."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if any(text in str(link).lower() for text in LOCKED):
            return True
        link = link.__cause__ or link.__context__
    return False


PATIENCE_S = 30.0
"""How long a call waits out a lock (another process's write transaction) before failing: a
15 s exclusive lock at start failed `fedcore run` after 9 s (ten tries, not a duration)."""


class StoreLocked(RuntimeError):
    """The store stayed locked longer than ``PATIENCE_S``: one line naming it."""


def with_retry(
    call: Callable[[], T], name: str = "mlflow", delay: float = 0.05, max_delay: float = 2.0,
    patience: float | None = None, store: str = "the MLflow store",
) -> T:
    """``call()``, again after a jittered, doubling pause (``delay`` to ``max_delay``) while
    SQLite is locked, for up to ``patience`` seconds (None: ``PATIENCE_S``); then
    ``StoreLocked`` naming ``store``."""
    patience = PATIENCE_S if patience is None else patience
    jitter = random.Random()  # own generator: never touches the global RNG
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not is_locked(exc):
                raise
            waited = time.monotonic() - start
            if waited >= patience:
                raise StoreLocked(
                    f"database is locked: {store} stayed locked for {waited:.0f} s ({name}; "
                    "another process holds a write transaction); run again once it is free"
                ) from None
            pause = min(max_delay, delay * 2**attempt) * (0.5 + jitter.random())
            pause = min(pause, max(patience - waited, 0.01))
            attempt += 1
            log.warning("MLflow store locked (%s); retry %d in %.2fs", name, attempt, pause)
            time.sleep(pause)


class RetryingClient:
    """An ``MlflowClient`` whose every method call goes through ``with_retry``."""

    def __init__(self, client: Any, store: str = "the MLflow store") -> None:
        self._client = client
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return with_retry(functools.partial(attr, *args, **kwargs), name,
                              store=self._store)

        return call
