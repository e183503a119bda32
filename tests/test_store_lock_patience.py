"""A store locked by another process's write transaction is waited out for
``fedcore.tracking.retry.PATIENCE_S`` (30 s), opening the store included: a 15 s exclusive lock
at start failed `fedcore run` after 9 s with ``database is locked`` and no path (ten tries,
and opening the store was not retried at all). Longer, it is one line naming the store."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedcore.core.compose.configure import load_config
from fedcore.tracking import retry
from fedcore.tracking.runner import run_tracked
from tests.conftest import TINY

HELD_S = 12.0  # beyond the 9 s the ten tries waited
ROOT = Path(__file__).resolve().parents[1]


def _hold(db: str, seconds: float, locked: threading.Event) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    locked.set()
    time.sleep(seconds)
    con.execute("COMMIT")
    con.close()


def test_a_store_locked_for_12_s_at_start_is_waited_out(tracking, tmp_path):
    """`fedcore run` in a new process (it opens the store: MLflow reads its schema)."""
    run_tracked(load_config(None, [*TINY, "rounds=1"]), figures=False)  # the store exists
    db = tracking.tracking_uri.removeprefix("sqlite:///")
    locked = threading.Event()
    holder = threading.Thread(target=_hold, args=(db, HELD_S, locked))
    holder.start()
    locked.wait(10)
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "fedcore", "run", *TINY, "rounds=1"],
                              env=dict(os.environ), cwd=ROOT, capture_output=True, text=True,
                              timeout=300, check=False)
    finally:
        holder.join()
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - start >= HELD_S - 1


def test_a_store_locked_beyond_the_patience_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(retry, "PATIENCE_S", 0.5)
    calls = []

    def locked() -> None:
        calls.append(time.monotonic())
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(retry.StoreLocked) as e:
        retry.with_retry(locked, "log_batch", store="the MLflow store sqlite:///x/m.db")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        "database is locked: the MLflow store sqlite:///x/m.db stayed locked for "), msg
    assert "(log_batch; another process holds a write transaction)" in msg
    assert len(calls) > 2 and 0.4 <= calls[-1] - calls[0] <= 1.5
