"""fedcore run's helper process that creates a new SQLite store's schema in parallel."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fedcore import cli
from fedcore.tracking import store_setup
from tests.conftest import TINY

# these tests check that nothing creates the store, or how it is created: no ready-made copy
pytestmark = pytest.mark.new_store


def _schema(db: Path) -> list[tuple[str, object]]:
    """Tables, indexes, each table's columns (name, type, not null, primary key) and the
    migration version: what MLflow reads (the DDL text differs between its creation paths)."""
    with sqlite3.connect(db) as con:
        rows: list[tuple[str, object]] = [
            (name, kind) for name, kind in con.execute(
                "select name, type from sqlite_master where name != 'sqlite_sequence' "
                "order by name")
        ]
        for (table,) in con.execute("select name from sqlite_master where type = 'table'"):
            cols = con.execute(f'pragma table_info("{table}")').fetchall()
            rows.append((table, sorted((c[1], c[2], c[3], c[5]) for c in cols)))
        version = con.execute("select version_num from alembic_version").fetchall()
    return [*rows, ("alembic", str(version))]


def test_fedcore_run_into_a_new_store_has_the_helper_make_mlflows_schema_after_valid_input(
    tracking, tmp_path, monkeypatch
):
    monkeypatch.setenv(store_setup.HELPER_ENV, "1")
    started = []
    start = store_setup.start_helper

    def spy(uri: str) -> store_setup.StoreHelper | None:
        helper = start(uri)
        started.append(helper)
        return helper

    monkeypatch.setattr(store_setup, "start_helper", spy)
    db = Path(tracking.tracking_uri.removeprefix("sqlite:///"))
    assert cli.main(["run", "rounds=zero"]) == 2
    assert started[0] is not None and not db.exists()  # bad input: the helper wrote nothing
    assert cli.main(["run", *TINY, "rounds=1"]) == 0
    assert started[1] is not None and started[1].proc.returncode == 0  # reaped, no error
    assert store_setup.start_helper(tracking.tracking_uri) is None  # an existing store: none
    from fedcore.tracking import mlflow_client

    client = mlflow_client(tracking)
    (run,) = client.search_runs([client.get_experiment_by_name(tracking.experiment).experiment_id])
    assert run.info.status == "FINISHED" and "final/accuracy" in run.data.metrics
    # the schema MLflow makes in a fresh process (in this one, an earlier store changes the DDL)
    make = ("from mlflow.tracking import MlflowClient; "
            f"MlflowClient(tracking_uri='sqlite:///{tmp_path / 'own.db'}').search_experiments()")
    subprocess.run([sys.executable, "-c", make], check=True, capture_output=True)
    own = _schema(tmp_path / "own.db")
    assert _schema(db) == own


def test_the_tests_store_client_makes_its_mlflow_client_only_under_the_store_lock(tmp_path):
    """MLflow's client creates a new store's schema when it is made: the tests' polling client
    must wait for the store lock first, or its migrations race a subprocess's (CI saw `table
    ... already exists` in the subprocess)."""
    import fcntl
    import os
    import threading
    import time

    from tests.processes import store_client

    db = tmp_path / "polled.db"
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a subprocess creating the schema holds the lock
    opener = threading.Thread(target=store_client, args=(f"sqlite:///{db}",), daemon=True)
    try:
        opener.start()
        time.sleep(5)  # an unlocked client makes the whole schema in about 1.5 s
        assert not db.exists() or db.stat().st_size == 0
    finally:
        os.close(fd)
    opener.join(120)
    assert not opener.is_alive() and db.stat().st_size > 0
