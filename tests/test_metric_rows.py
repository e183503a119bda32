"""Metric rows inserted into MLflow's SQL store (``fedcore.tracking.metric_rows``) read back as
``log_batch`` leaves them: every history, the latest values (by MLflow's rule), NaN and ±Inf,
a repeated row; a row already stored sends the batch through ``log_batch``; a run that is not
active and a bad key fail as ``log_batch`` fails. A real SQLite store throughout."""

from __future__ import annotations

import math

import pytest
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from fedcore.tracking.metric_rows import insert_metric_rows, sql_store
from fedcore.tracking.run_store import MlflowRunStore

BATCHES = [
    [("train/loss", 2.3, 1000, 1), ("test/accuracy", 0.1, 1000, 1), ("train/loss", 2.1, 1000, 2),
     ("agg/rejected", math.nan, 1000, 2), ("comm/bytes", math.inf, 1000, 2),
     ("delta", -math.inf, 1000, 2), ("train/loss", 2.1, 1000, 2),  # a repeated row
     ("agg/rejected", float("nan"), 1000, 2)],  # a repeated NaN, another float object
    [("train/loss", 1.9, 1001, 3), ("test/accuracy", 0.05, 1001, 0),  # an older step
     ("agg/rejected", 1.0, 1001, 3), ("delta", 0.5, 999, 2),  # the same step, older time
     ("comm/bytes", 7.0, 1001, 2), ("new/key", 3.0, 1001, 3)],  # the same step, later time
]


@pytest.fixture
def client(tmp_path):
    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def _logged(client, run_id):
    run = client.get_run(run_id)
    history = {key: [(m.step, m.timestamp, m.value) for m in sorted(
        client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))]
        for key in run.data.metrics}
    return history, run.data.metrics


def _nan_equal(a, b):
    return repr(a) == repr(b)  # nan == nan as text


def test_inserted_rows_read_back_as_log_batch_leaves_them(client):
    experiment = client.create_experiment("rows")
    by_batch = client.create_run(experiment).info.run_id
    inserted = client.create_run(experiment).info.run_id
    store = sql_store(client)
    assert store is not None
    for rows in BATCHES:
        client.log_batch(by_batch, metrics=[Metric(*r) for r in rows])
        assert insert_metric_rows(store, inserted, rows)
    expected, got = _logged(client, by_batch), _logged(client, inserted)
    assert _nan_equal(got, expected)
    latest = got[1]
    assert latest["test/accuracy"] == 0.1 and latest["delta"] == -1.7976931348623157e308
    assert latest["comm/bytes"] == 7.0 and latest["train/loss"] == 1.9
    assert math.isnan(latest["agg/rejected"]) is False and latest["agg/rejected"] == 1.0
    assert [v for _, _, v in got[0]["train/loss"]] == [2.3, 2.1, 1.9]  # the repeat stored once
    assert len(got[0]["agg/rejected"]) == 2  # the NaN once, then 1.0


def test_a_row_already_stored_sends_the_batch_through_log_batch(client, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("FEDCORE_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    runs = MlflowRunStore()
    experiment = runs.experiment_id()
    run_id = runs.create_run("again", {})
    store = sql_store(runs.client)
    assert store is not None and sql_store(client) is not None
    assert insert_metric_rows(store, run_id, BATCHES[0])
    again = [*BATCHES[0][:2], ("train/loss", 1.5, 1002, 4)]
    assert not insert_metric_rows(store, run_id, again)  # nothing written
    assert len(client.get_metric_history(run_id, "train/loss")) == 2
    runs.log_metrics(run_id, again)  # log_batch skips the stored rows, writes the new one
    assert [m.value for m in client.get_metric_history(run_id, "train/loss")] == [2.3, 2.1, 1.5]
    assert client.get_experiment(experiment).name == runs.settings.experiment


def test_a_run_that_is_not_active_and_a_bad_row_fail_as_log_batch_fails(client):
    experiment = client.create_experiment("fails")
    store = sql_store(client)
    deleted = client.create_run(experiment).info.run_id
    client.delete_run(deleted)
    for write in (lambda rows: client.log_batch(deleted, metrics=[Metric(*r) for r in rows]),
                  lambda rows: insert_metric_rows(store, deleted, rows)):
        with pytest.raises(MlflowException, match="must be in the 'active' state"):
            write(BATCHES[0])
    run_id = client.create_run(experiment).info.run_id
    for bad in [("../up", 1.0, 1000, 1), ("ok", "text", 1000, 1), ("ok", 1.0, "1", 1)]:
        with pytest.raises(MlflowException) as by_batch:
            client.log_batch(run_id, metrics=[Metric(*bad)])
        rows = [("ok", 2.0, 1000, 0), bad]
        with pytest.raises(MlflowException) as inserted:
            insert_metric_rows(store, run_id, rows)
        assert str(inserted.value).replace("metrics[1]", "metrics[0]") == str(by_batch.value)
    assert client.get_run(run_id).data.metrics == {}  # nothing of a failed batch is kept


def test_a_store_that_is_not_sql_is_not_written_directly():
    assert sql_store(MlflowClient("http://127.0.0.1:9")) is None
    assert sql_store(object()) is None
