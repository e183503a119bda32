"""`fedcore tune` for real under failure and concurrency: Prefect task runs named by trial
number, a SIGKILLed study resumed without ghost RUNNING trials, processes creating one new
Optuna SQLite file together, and parallel runs logging the same dataset input."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from .processes import prefect_home, store_client

SET = {"method": "fedquad", "model.name": "mlp", "rounds": 1, "dataset.num_clients": 6,
       "clients_per_round": 3, "seed": 1000}
ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path, name: str, **over) -> Path:
    spec = {
        "name": name,
        "set": SET,
        "search": {"method.client.m1": {"type": "float", "low": 0.2, "high": 1.9}},
        "n_trials": 2,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        **over,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PREFECT_HOME": prefect_home(tmp_path / "prefect"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    return env


def _trial_runs(tracking_uri: str, study: str) -> dict[int, object]:
    client = store_client(tracking_uri)  # `fedcore tune` may be creating the store
    exp = client.get_experiment_by_name("fedcore").experiment_id
    runs = client.search_runs([exp], f"tags.`fedcore.role` = 'trial' and tags.study = '{study}'")
    return {int(r.data.tags["trial_number"]): r for r in runs}


@pytest.mark.slow
def test_flow_task_runs_are_named_by_trial_number(prefect_harness, tracking, tmp_path):
    import optuna
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from fedcore.flows.tune import tune

    path = _study(tmp_path, "named", n_trials=3)
    names = []
    for n_trials in (3, 2):  # a new study, then resumed: numbering goes on
        state = tune(str(path), [f"n_trials={n_trials}"], max_workers=2, return_state=True)
        rows = state.result()
        assert len(rows) == n_trials
        with get_client(sync_client=True) as client:
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
        assert sorted(t.name for t in tasks) == sorted(f"trial-{r['number']}" for r in rows)
        names += [t.name for t in tasks]
    study = optuna.load_study(study_name="named", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert sorted(names) == [f"trial-{t.number}" for t in study.trials] == [
        f"trial-{n}" for n in range(5)]
    runs = _trial_runs(tracking.tracking_uri, "named")
    assert {n: r.info.run_name for n, r in runs.items()} == {
        n: f"named-trial-{n}" for n in range(5)}


def _heartbeat_rows(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from trial_heartbeats").fetchone()[0]


@pytest.mark.slow
def test_killed_tune_fails_its_running_trial_and_the_rerun_retries_it(tmp_path):
    """SIGKILL mid-trial leaves the trial RUNNING; the rerun (after the grace period) fails it,
    ends its MLflow run FAILED and runs its parameters again as its first trial."""
    # killed as a single process, rerun with --workers: both go through ask_trial/run_trial
    import optuna

    path = _study(tmp_path, "killed", heartbeat={"interval": 1, "grace_period": 2},
                  set={**SET, "rounds": 20, "local.epochs": 1, "local.steps": 2})
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "tune", str(path)]
    first = subprocess.Popen(line, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    mlflow_uri = env["MLFLOW_TRACKING_URI"]
    deadline = time.monotonic() + 300
    while True:  # until trial 1 trains (trial 0 complete), with its heartbeat recorded
        assert first.poll() is None, first.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
        try:
            runs = _trial_runs(mlflow_uri, "killed")
        except Exception:  # noqa: BLE001  (the store or experiment is not created yet)
            continue
        if 1 in runs and runs[1].info.status == "RUNNING" and \
                store_client(mlflow_uri).get_metric_history(runs[1].info.run_id, "train/loss"):
            break
    first.send_signal(signal.SIGKILL)
    first.wait()
    study = optuna.load_study(study_name="killed", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]  # the ghost
    assert _heartbeat_rows(tmp_path / "optuna.db") == 2
    killed = study.trials[1]
    time.sleep(3)  # past the grace period

    # the rerun through the Prefect flow; n_trials counts the trials this run starts, the
    # retry of the killed trial (asked first) among them
    again = subprocess.run([*line, "--workers", "2"], env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    study = optuna.load_study(study_name="killed", storage=storage)
    states = {t.number: t.state.name for t in study.trials}
    assert states == {0: "COMPLETE", 1: "FAIL", 2: "COMPLETE", 3: "COMPLETE"}
    retry = study.trials[2]
    assert retry.system_attrs["failed_trial"] == 1
    assert retry.params == killed.params
    runs = _trial_runs(mlflow_uri, "killed")
    assert runs[1].info.status == "FAILED" and runs[1].data.tags["trial_state"] == "FAIL"
    assert "heartbeat" in runs[1].data.tags["failure_reason"]
    assert {n: r.info.status for n, r in runs.items() if n != 1} == {
        0: "FINISHED", 2: "FINISHED", 3: "FINISHED"}


def _open_storage(url: str, barrier, results) -> None:
    from fedcore.tuning.study import make_storage

    barrier.wait()
    try:
        import optuna

        optuna.create_study(storage=make_storage(url), study_name="s", load_if_exists=True)
        results.put("ok")
    except Exception as exc:  # noqa: BLE001  (reported to the test)
        results.put(f"{type(exc).__name__}: {str(exc)[:200]}")


@pytest.mark.slow
def test_processes_opening_a_new_sqlite_storage_at_once_all_succeed(tmp_path):
    """Eight processes released by one barrier create the same new Optuna SQLite file; without
    the lock some fail with a unique-constraint or `table already exists` error."""
    import fedcore.tuning.study  # noqa: F401  (imported once, before the fork)

    ctx = multiprocessing.get_context("fork")
    for attempt in range(4):
        url = f"sqlite:///{tmp_path / f'new{attempt}.db'}"
        barrier, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_open_storage, args=(url, barrier, results))
                 for _ in range(8)]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert outcomes == ["ok"] * 8, outcomes


@pytest.mark.slow
def test_four_tune_processes_start_together_on_a_new_storage(tmp_path):
    import optuna

    path = _study(tmp_path, "together", n_trials=1)
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "tune", str(path)]
    procs = [subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    study = optuna.load_study(study_name="together",
                              storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert sorted(t.number for t in study.trials) == [0, 1, 2, 3]
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    runs = _trial_runs(env["MLFLOW_TRACKING_URI"], "together")
    assert sorted(runs) == [0, 1, 2, 3]
    assert all(r.info.status == "FINISHED" for r in runs.values())


def test_runs_started_together_all_log_the_dataset_input(tracking):
    """MLflow stores a dataset once per experiment: concurrent first inserts of the same one
    collide, and every run must still get its input."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    from fedcore.tracking import get_experiment_id, mlflow_client
    from fedcore.tracking.inputs import log_dataset_input

    client = mlflow_client(tracking)
    exp = get_experiment_id(client, tracking)
    runs = [client.create_run(exp).info.run_id for _ in range(8)]
    dataset = DatasetInput(
        Dataset(name="digits", digest="d1", source_type="local", source=json.dumps({})),
        [InputTag("mlflow.data.context", "train")],
    )
    barrier, errors = threading.Barrier(len(runs)), []

    def log(run_id: str) -> None:
        barrier.wait()
        try:
            log_dataset_input(client, run_id, dataset)
        except Exception as exc:  # noqa: BLE001  (reported to the test)
            errors.append(exc)

    threads = [threading.Thread(target=log, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for run_id in runs:
        (got,) = client.get_run(run_id).inputs.dataset_inputs
        assert got.dataset.digest == "d1"
