"""A new SQLite MLflow store's schema, created by a helper process while the run starts.

MLflow creates a new SQLite store's schema by running its migrations the first time a client
opens the store: about 1.5 s of CPU, and on a busy disk several seconds more of an fsync per
statement. ``fedcore run`` hands that to a helper process (``start_helper``) that imports
MLflow at once, in parallel with the command's own start (torch, the config, the data), and
creates the schema once the command says so (``StoreHelper.go``: after the config and the
data proved valid, so that bad input writes nothing), with one fsync at the end instead of one
per statement. Whoever first holds ``store_lock`` creates the schema, the helper or the
command's own client (which waits for the lock and then finds the schema ready), so the store is
the same either way, and a helper that dies only leaves the work to the command. A stop
(Ctrl-C) does not interrupt the helper's migrations.

``FEDCORE_STORE_HELPER=0`` turns the helper off (the command creates the schema itself).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HELPER_ENV = "FEDCORE_STORE_HELPER"
_OPENED: set[str] = set()  # SQLite stores this process has opened (their schema is ready)


def sqlite_folder(db: Path, key: str) -> None:
    """Make the folder of SQLite database ``db``: any missing folders under the project folder
    (the default stores), elsewhere only the last one, inside an existing folder other than the
    file system's root (``sqlite:////nonexistent/x/mlflow.db`` made folders at the root); else
    a one-line ``ConfigError`` naming ``key``."""
    from fedcore.core.config import ConfigError, project_root

    folder = db.parent
    if folder.is_dir():
        return
    root = project_root().resolve()
    target = folder.resolve()
    above = target.parent
    if not target.is_relative_to(root) and (not above.is_dir() or above == Path(above.anchor)):
        raise ConfigError(f"{key}: the folder {folder} of SQLite database {db.name} does not "
                          f"exist; create it first (fedcore makes missing folders only under "
                          f"the project folder {root}, or one inside an existing folder other "
                          "than /)")
    folder.mkdir(parents=True, exist_ok=True)


@contextmanager
def store_lock(tracking_uri: str, key: str = "tracking_uri") -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<database>.lock`` while this process first opens a SQLite
    store: one process creates or migrates the schema, the others wait and then find it ready.
    The kernel releases the lock if its holder dies. ``key`` names the setting in errors."""
    if not tracking_uri.startswith("sqlite:///") or tracking_uri in _OPENED:
        yield
        return
    db = Path(tracking_uri.removeprefix("sqlite:///"))
    sqlite_folder(db, key)
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


class StoreHelper:
    """The helper process of one new store; ``go`` lets it create the schema, ``close``
    (always called) lets it go without (when not told to) and reaps it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.told = False

    def go(self) -> None:
        """Create the schema now (in the helper, while this process goes on)."""
        self.told = True
        self._send(b"go\n")

    def close(self) -> None:
        """Reap the helper: one told to go is waited for (its migrations hold the store's
        lock); one not told has written nothing and is ended at once (a config error's exit
        does not wait for its imports)."""
        if not self.told:
            self.proc.kill()
        self._send(b"")
        self.proc.wait()

    def _send(self, line: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(line)
            stdin.close()
        except OSError:  # the helper is gone; the command's own client does the work
            pass


def start_helper(tracking_uri: str) -> StoreHelper | None:
    """A helper for a new SQLite store (None for an existing store, another kind of store,
    with ``FEDCORE_STORE_HELPER=0``, or when no process can be started)."""
    if os.environ.get(HELPER_ENV, "1") == "0" or not is_new_sqlite_store(tracking_uri):
        return None
    from fedcore.core.config import ConfigError

    try:  # a folder that may not be made: the run itself says so, in one line
        sqlite_folder(Path(tracking_uri.removeprefix("sqlite:///")), "tracking_uri")
    except ConfigError:
        return None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedcore.tracking.store_setup", tracking_uri],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        )
    except OSError:
        return None
    return StoreHelper(proc)


def _helper_main(tracking_uri: str) -> int:
    """The helper: import MLflow, wait for ``go`` (or end of input: exit, nothing written), then
    open the store under ``store_lock``, creating its schema unless another process did."""
    from fedcore.runtime_env.env import configure_environment

    configure_environment()
    from mlflow.store.tracking import sqlalchemy_store  # noqa: F401  (the slow imports)
    from mlflow.tracking import MlflowClient

    if sys.stdin.readline().strip() != "go":
        return 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C must not stop migrations midway
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _no_sync)
    with store_lock(tracking_uri):
        MlflowClient(tracking_uri=tracking_uri)  # as the command's client opens the store
        _fsync(Path(tracking_uri.removeprefix("sqlite:///")))
    return 0


def _no_sync(connection: Any, record: Any) -> None:
    """SQLite without an fsync per statement, in the helper only: the migrations' many small
    transactions then take a fraction of their time; one fsync at the end makes them durable."""
    connection.execute("PRAGMA synchronous=OFF")


def _fsync(db: Path) -> None:
    """Flush the new database file and its folder entry to disk."""
    for path, flags in ((db, os.O_RDONLY), (db.parent, os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


if __name__ == "__main__":
    sys.exit(_helper_main(sys.argv[1]))
