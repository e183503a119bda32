"""``fedcore run``'s MLflow writes in a writer process (fedcore/tracking/writer_process.py):
the same records as a run written in its own process, no MLflow in the training process, a new
store's schema as MLflow makes it, errors and a dead writer reported."""

from __future__ import annotations

import errno
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from fedcore import cli, faults
from fedcore.tracking import writer_process
from fedcore.tracking.writer_process import WRITER_ENV, WriterError, WriterGone

from .conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
VARYING_TAGS = {"fedcore.pid", "mlflow.runName"}  # the process, and the name's time suffix


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


def _record(client: MlflowClient, run_id: str) -> dict[str, object]:
    """What a run holds, less what differs between two processes (pid, clock times, the
    machine's load)."""
    run = client.get_run(run_id)
    metrics = {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)]
               for k in run.data.metrics if not k.startswith("system/") and k != "agg/seconds"}
    return {
        "status": run.info.status,
        "params": run.data.params,
        "tags": {k: v for k, v in run.data.tags.items() if k not in VARYING_TAGS},
        "metrics": metrics,
        "system": sorted(k for k in run.data.metrics if k.startswith("system/")),
        "artifacts": sorted(a.path for a in client.list_artifacts(run_id)),
        "dataset": [(i.dataset.name, i.dataset.digest, i.dataset.profile)
                    for i in run.inputs.dataset_inputs],
        "models": len(run.outputs.model_outputs),
    }


def _runs(client: MlflowClient, experiment: str) -> list[str]:
    exp = client.get_experiment_by_name(experiment).experiment_id
    return [r.info.run_id for r in client.search_runs([exp], order_by=["start_time ASC"])]


def test_the_writer_makes_mlflows_schema_only_after_valid_input(tracking, tmp_path, monkeypatch):
    started = []
    start = writer_process.start

    def spy() -> writer_process.Writer | None:
        started.append(start())
        return started[-1]

    monkeypatch.setattr(writer_process, "start", spy)
    db = Path(tracking.tracking_uri.removeprefix("sqlite:///"))
    assert cli.main(["run", "rounds=zero"]) == 2
    assert started[0] is not None and not db.exists()  # bad input: the writer wrote nothing
    assert started[0].proc.returncode is not None  # and it was ended
    assert cli.main(["run", *TINY, "rounds=1"]) == 0
    assert started[1] is not None and started[1].proc.returncode == 0  # reaped, no error
    client = MlflowClient(tracking.tracking_uri)
    (run_id,) = _runs(client, tracking.experiment)
    assert client.get_run(run_id).info.status == "FINISHED"
    # the schema MLflow makes in a fresh process (in this one, an earlier store changes the DDL)
    make = ("from mlflow.tracking import MlflowClient; "
            f"MlflowClient(tracking_uri='sqlite:///{tmp_path / 'own.db'}').search_experiments()")
    subprocess.run([sys.executable, "-c", make], check=True, capture_output=True)
    assert _schema(db) == _schema(tmp_path / "own.db")
    with sqlite3.connect(db) as con:  # the file is a sound database
        assert con.execute("pragma integrity_check").fetchone() == ("ok",)


def test_a_run_written_by_the_writer_holds_what_one_written_in_process_holds(
        tracking, monkeypatch):
    line = ["run", *TINY, "rounds=2"]
    assert cli.main(line) == 0  # the writer process (the default)
    monkeypatch.setenv(WRITER_ENV, "0")
    assert cli.main(line) == 0  # the same run, written from this process
    client = MlflowClient(tracking.tracking_uri)
    by_writer, in_process = (_record(client, r) for r in _runs(client, tracking.experiment))
    assert by_writer["status"] == "FINISHED" and by_writer["models"] == 1
    assert "per_client.parquet" in by_writer["artifacts"]
    assert by_writer["system"]  # system metrics sampled by the writer
    assert by_writer == in_process


def test_the_training_process_never_imports_mlflow(tmp_path):
    """A whole `fedcore run` process: after the run, no MLflow, SQLAlchemy, pandas, pyarrow or
    matplotlib in it (the figures are the figure helper's), and the run is FINISHED in the
    store, quietly (MLflow's "Creating initial MLflow database tables" is not shown)."""
    code = (
        "import sys; from fedcore.cli import main\n"
        f"assert main({['run', *TINY, 'rounds=1']!r}) == 0\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'mlflow', 'sqlalchemy', 'pandas', 'matplotlib', 'pyarrow'})\n"
        "assert not heavy, heavy\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "FEDCORE_FIGURE_HELPER": "1"}  # as a user runs it (the suite draws in-process)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "mlflow" not in out.stderr, out.stderr[-3000:]
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    (run,) = client.search_runs([client.get_experiment_by_name("fedcore").experiment_id])
    assert run.info.status == "FINISHED" and "final/accuracy" in run.data.metrics


def test_an_error_in_the_writer_is_raised_in_the_command_with_its_type(tracking):
    writer = writer_process.start()
    assert writer is not None
    try:
        store = writer.go(tracking)
        with pytest.raises(WriterError, match="MlflowException.*not found"):
            store.log_tags("0" * 32, {"a": "b"})  # no such run
        with pytest.raises(AttributeError, match="no call 'client'"):
            store.client  # noqa: B018  (the store's calls only, never its MLflow client)
        assert store.experiment_id()  # the writer goes on after an error
    finally:
        writer.close()
    assert writer.proc.returncode == 0


def test_a_full_disk_in_the_writer_stays_a_full_disk():
    assert faults.is_disk_full(writer_process._portable(OSError(errno.ENOSPC, "write")))
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as exc:
            raise MlflowException("(sqlite3.OperationalError) insert failed") from exc
    except MlflowException as exc:
        portable = writer_process._portable(exc)
    assert isinstance(portable, WriterError) and faults.is_disk_full(portable)
    assert not faults.is_disk_full(writer_process._portable(ValueError("bad value")))


def test_a_dead_writer_fails_the_next_write_with_a_clear_message(tracking):
    writer = writer_process.start()
    assert writer is not None
    store = writer.go(tracking)
    assert store.experiment_id()
    writer.proc.kill()
    writer.proc.wait()
    with pytest.raises(WriterGone, match=f"exited with code -9.*{WRITER_ENV}=0"):
        store.log_tags("0" * 32, {"a": "b"})
    writer.close()
