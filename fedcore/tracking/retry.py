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


def with_retry(
    call: Callable[[], T], name: str = "mlflow", attempts: int = 10, delay: float = 0.05,
    max_delay: float = 2.0,
) -> T:
    """``call()``, again after a jittered, doubling pause while SQLite is locked."""
    jitter = random.Random()  # own generator: never touches the global RNG
    for attempt in range(attempts - 1):
        try:
            return call()
        except Exception as exc:
            if not is_locked(exc):
                raise
            pause = min(max_delay, delay * 2**attempt) * (0.5 + jitter.random())
            log.warning("MLflow store locked (%s); retry %d in %.2fs", name, attempt + 1, pause)
            time.sleep(pause)
    return call()


class RetryingClient:
    """An ``MlflowClient`` whose every method call goes through :func:`with_retry`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return with_retry(functools.partial(attr, *args, **kwargs), name)

        return call
