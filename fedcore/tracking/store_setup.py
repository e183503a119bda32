"""A SQLite MLflow store opened by one process at a time, and a new store's schema made fast.

MLflow creates a new SQLite store's schema by running its migrations the first time a client
opens the store: about 1.5 s of CPU, and on a busy disk several seconds more of an fsync per
statement. :func:`store_lock` lets one process create or migrate the schema while the others
wait and then find it ready; :func:`fast_schema` (used by ``fedcore run``'s writer process,
:mod:`fedcore.tracking.writer_process`) runs the migrations without an fsync per statement and
makes the file durable with one fsync at the end.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_OPENED: set[str] = set()  # SQLite stores this process has opened (their schema is ready)


@contextmanager
def store_lock(tracking_uri: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<database>.lock`` while this process first opens a SQLite
    store: one process creates or migrates the schema, the others wait and then find it ready.
    The kernel releases the lock if its holder dies."""
    if not tracking_uri.startswith("sqlite:///") or tracking_uri in _OPENED:
        yield
        return
    db = Path(tracking_uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
        _OPENED.add(tracking_uri)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def is_new_sqlite_store(tracking_uri: str) -> bool:
    """Whether ``tracking_uri`` is a SQLite store whose database file does not exist yet."""
    if not tracking_uri.startswith("sqlite:///"):
        return False
    db = Path(tracking_uri.removeprefix("sqlite:///"))
    return not db.exists() or db.stat().st_size == 0


@contextmanager
def fast_schema(tracking_uri: str) -> Iterator[None]:
    """While a new SQLite store's schema is created in this block: SQLite without an fsync per
    statement (MLflow's migrations are many small transactions), then one fsync of the file at
    the end, and the connections opened meanwhile set back to SQLite's default. Any other store
    is left as it is."""
    if not is_new_sqlite_store(tracking_uri):
        yield
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    opened: list[Any] = []

    def no_sync(connection: Any, record: Any) -> None:
        connection.execute("PRAGMA synchronous=OFF")
        opened.append(connection)

    event.listen(Engine, "connect", no_sync)
    try:
        yield
    finally:
        event.remove(Engine, "connect", no_sync)
        for connection in opened:  # pooled connections stay open for the process's writes
            try:
                connection.execute("PRAGMA synchronous=FULL")
            except Exception:  # noqa: BLE001, S110  (a connection already closed)
                pass
    _fsync(Path(tracking_uri.removeprefix("sqlite:///")))


def _fsync(db: Path) -> None:
    """Flush the new database file and its folder entry to disk."""
    for path, flags in ((db, os.O_RDONLY), (db.parent, os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
