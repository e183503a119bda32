"""SIGTERM / SIGINT to `fedcore run`, `fedcore sweep` (threads, Dask) and `fedcore tune
--workers 2`: the process finishes the round in flight, marks its runs KILLED (not RUNNING),
stops its temporary Prefect server and exits 128 + signal; running the same line again resumes.
Real signals, real subprocesses (docs/how-to/checkpoints.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from .processes import children, outlived, prefect_home, store_client

ROOT = Path(__file__).resolve().parents[1]
FAST = {"model.name": "mlp", "dataset.num_clients": 6, "clients_per_round": 3,
        "local.epochs": 1, "local.steps": 2, "eval_every": 1}
STOP_WITHIN_S = 60  # from the signal to the exit: a round, the stop's writes, interpreter exit
# rounds of the cells a sweep test stops: enough to be mid-run when the signal lands, few enough
# that the rerun, which plays the rest of them, stays short (300 took minutes on a busy machine)
LONG = 100


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PREFECT_HOME": prefect_home(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    return env





def _wait_for(proc: subprocess.Popen, client: MlflowClient, query: str, count: int) -> list:
    """Poll the store until ``count`` runs match ``query`` (the process must stay alive)."""
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no run started in time"
        time.sleep(0.3)
        exp = client.get_experiment_by_name("fedcore")
        if exp is None:
            continue
        runs = client.search_runs([exp.experiment_id], query)
        if len(runs) >= count:
            return runs


def _stop(proc: subprocess.Popen, signum: int) -> tuple[str, float]:
    """Send ``signum``; the process's stderr and the seconds it took to exit."""
    proc.send_signal(signum)
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return err, time.monotonic() - start


def _runs(client: MlflowClient, query: str) -> list:
    exp = client.get_experiment_by_name("fedcore").experiment_id
    return client.search_runs([exp], query)


def test_sigterm_stops_a_sweep_at_a_round_boundary_and_the_rerun_resumes(tmp_path):
    """Three workers, so the three cells start together: the 2-round cell has played its rounds
    while the other two are early in theirs, and they are stopped mid-run (KILLED, with their
    rounds and a checkpoint); the rerun skips the first, resumes the others. (With two workers
    the third cell started only after the first finished, and on a loaded machine the second
    could reach its last round, which a stop does not interrupt, before the third began.)"""
    sweep_file = tmp_path / "stop.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "stop", "grid": {"rounds": [2, LONG, LONG + 1]},
        "set": {**FAST, "checkpoint_every": 5, "checkpoint_dir": str(tmp_path / "ck")}}))
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "sweep", str(sweep_file), "--workers", "3"]
    first = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    client = store_client(env["MLFLOW_TRACKING_URI"])
    # the 2-round cell has recorded its last round (its end is written in the background, and
    # the sweep waits for that before it exits); waiting for FINISHED instead let a loaded
    # machine play the long cells to their last round, which a stop does not interrupt
    (short,) = _wait_for(first, client, "tags.sweep = 'stop' and params.rounds = '2' "
                         "and metrics.`train/loss` > -1", 1)
    while len(client.get_metric_history(short.info.run_id, "train/loss")) < 2:
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.1)
    _wait_for(first, client, "tags.sweep = 'stop' and attributes.status = 'RUNNING' "
              "and params.rounds != '2' and metrics.`train/loss` > -1", 2)
    servers = children(first.pid)
    assert servers, "the sweep runs its Prefect server as a child process"
    err, seconds = _stop(first, signal.SIGTERM)
    assert first.returncode == 143, err[-3000:]
    assert err.rstrip().splitlines()[-1].startswith("fedcore: stopped by SIGTERM; run the same "
                                                    "command again to resume"), err[-2000:]
    assert not outlived(servers), "the temporary Prefect server outlived the sweep"
    assert not _runs(client, "tags.sweep = 'stop' and attributes.status = 'RUNNING'")
    killed = _runs(client, "tags.sweep = 'stop' and attributes.status = 'KILLED' "
                   "and tags.config_hash != ''")
    every = {r.info.run_id[:8]: (r.info.status, r.data.params.get("rounds"),
                                 r.data.tags.get("failure_reason"))
             for r in _runs(client, "tags.sweep = 'stop' and tags.config_hash != ''")}
    assert len(killed) == 2, (every, err[-4000:])
    stopped_at = {}
    for run in killed:
        rounds = len(client.get_metric_history(run.info.run_id, "train/loss"))
        assert 0 < rounds < LONG  # the finished rounds stay recorded
        assert run.data.tags["failure_reason"] == (
            f"StopRequested: stopped by SIGTERM after round {rounds}")
        stopped_at[run.info.run_id] = rounds
    parent = _runs(client, "tags.`fedcore.role` = 'sweep'")[0]
    assert parent.info.status == "KILLED"

    again = subprocess.run(line, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r.split()[0] for r in again.stdout.strip().splitlines()[-3:]] == [
        "skipped", "finished", "finished"], again.stdout
    finished: dict[str, int] = {}
    for run in _runs(client, "tags.sweep = 'stop' and tags.config_hash != ''"):
        assert run.info.status == "FINISHED"
        finished[run.data.tags["config_hash"]] = finished.get(run.data.tags["config_hash"], 0) + 1
        if run.info.run_id in stopped_at:  # resumed from the checkpoint of the stop's round
            assert run.data.tags["fedcore.resumed_from_round"] == str(stopped_at[run.info.run_id])
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
            assert sorted(steps) == list(range(1, int(run.data.params["rounds"]) + 1))
    assert sorted(finished.values()) == [1, 1, 1]
    print(f"sweep: exited {seconds:.1f} s after SIGTERM; stopped after rounds "
          f"{sorted(stopped_at.values())} of {LONG} and {LONG + 1}")


def test_sigterm_stops_a_sweep_on_a_dask_local_cluster(tmp_path):
    """The signal reaches only the flow's process; the cells on the worker processes stop at
    their next round boundary through the sweep's Dask event."""
    sweep_file = tmp_path / "dask.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "dask", "grid": {"seed": [0, 1, 2]}, "set": {**FAST, "rounds": 300}}))
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "sweep", str(sweep_file), "--workers", "2",
            "--runner", "dask"]
    proc = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    client = store_client(env["MLFLOW_TRACKING_URI"])
    _wait_for(proc, client, "tags.sweep = 'dask' and attributes.status = 'RUNNING' "
              "and metrics.`train/loss` > -1", 2)
    helpers = children(proc.pid)  # the Prefect server and the cluster's processes
    err, seconds = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err[-3000:]
    assert not outlived(helpers), "a server or Dask process outlived the sweep"
    assert not _runs(client, "tags.sweep = 'dask' and attributes.status = 'RUNNING'")
    killed = _runs(client, "tags.sweep = 'dask' and tags.config_hash != ''")
    assert len(killed) == 2 and {r.info.status for r in killed} == {"KILLED"}
    for run in killed:
        rounds = len(client.get_metric_history(run.info.run_id, "train/loss"))
        assert 0 < rounds < 300 and run.data.tags["failure_reason"] == (
            f"StopRequested: stopped by the sweep's stop request after round {rounds}")
    print(f"dask sweep: exited {seconds:.1f} s after SIGTERM")


@pytest.mark.parametrize("runner", ["thread", "dask"])
def test_ctrl_c_in_a_terminal_stops_a_sweep_and_not_its_helpers_first(tmp_path, runner):
    """A terminal's Ctrl-C is SIGINT to the whole foreground process group. The temporary
    Prefect server (its own session) and the LocalCluster's workers (they ignore SIGINT) keep
    serving until the cells have stopped at a round boundary; without that the cells' API
    calls to the dead server, or the dead workers' futures, hung the sweep."""
    sweep_file = tmp_path / "group.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "group", "grid": {"seed": [0, 1, 2]}, "set": {**FAST, "rounds": 300}}))
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "sweep", str(sweep_file), "--workers", "2",
            "--runner", runner]
    proc = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # a terminal's foreground job
    client = store_client(env["MLFLOW_TRACKING_URI"])
    _wait_for(proc, client, "tags.sweep = 'group' and attributes.status = 'RUNNING' "
              "and metrics.`train/loss` > -1", 2)
    helpers = children(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 130, err[-3000:]
    assert not outlived(helpers), "a server or Dask process outlived the sweep"
    assert not _runs(client, "tags.sweep = 'group' and attributes.status = 'RUNNING'")
    cells = _runs(client, "tags.sweep = 'group' and tags.config_hash != ''")
    assert len(cells) == 2 and {r.info.status for r in cells} == {"KILLED"}, err[-3000:]
    for run in cells:
        assert 0 < len(client.get_metric_history(run.info.run_id, "train/loss")) < 300
    (parent,) = _runs(client, "tags.`fedcore.role` = 'sweep'")
    assert parent.info.status == "KILLED"


def test_sigint_stops_fedcore_run_and_the_rerun_resumes_its_run(tmp_path):
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "run", "rounds=60", "checkpoint_every=10",
            f"checkpoint_dir={tmp_path / 'ck'}",
            *(f"{k}={v}" for k, v in FAST.items())]
    first = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    client = store_client(env["MLFLOW_TRACKING_URI"])
    _wait_for(first, client, "attributes.status = 'RUNNING' and metrics.`train/loss` > -1", 1)
    err, seconds = _stop(first, signal.SIGINT)
    assert first.returncode == 130, err[-3000:]
    assert "fedcore: SIGINT received, stopping after the current round" in err
    assert err.rstrip().splitlines()[-1].startswith("fedcore: stopped by SIGINT;"), err[-2000:]
    (run,) = _runs(client, "tags.config_hash != ''")
    rounds = len(client.get_metric_history(run.info.run_id, "train/loss"))
    assert run.info.status == "KILLED" and 0 < rounds < 60, (run.info.status, rounds)

    again = subprocess.run(line, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    (resumed,) = _runs(client, "tags.config_hash != ''")
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert resumed.data.tags["fedcore.resumed_from_round"] == str(rounds)
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == list(range(1, 61))
    print(f"run: exited {seconds:.1f} s after SIGINT")


def test_a_second_signal_exits_at_once(tmp_path):
    """A round long enough to wait for: the first SIGINT waits for it, the second does not."""
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "run", "rounds=3",
            *(f"{k}={v}" for k, v in {**FAST, "local.steps": 100000}.items())]
    proc = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    client = store_client(env["MLFLOW_TRACKING_URI"])
    _wait_for(proc, client, "attributes.status = 'RUNNING'", 1)
    time.sleep(2)  # inside round 1 (its 100000 local steps take minutes)
    proc.send_signal(signal.SIGINT)
    time.sleep(2)
    assert proc.poll() is None, "the first signal waits for the round in flight"
    err, _ = _stop(proc, signal.SIGINT)
    assert proc.returncode == 130 and "fedcore: second SIGINT, exiting now" in err, err[-2000:]


def test_sigterm_stops_tune_with_two_workers_trials_fail_and_runs_killed(tmp_path):
    study = tmp_path / "stop.yaml"
    study.write_text(yaml.safe_dump({
        "name": "stop", "set": {"method": "fedavg", "rounds": 80, "seed": 1000, **FAST},
        "search": {"local.lr": {"type": "float", "low": 0.01, "high": 0.1}},
        "metric": "final/accuracy", "n_trials": 4,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}"}))
    env = _env(tmp_path)
    line = [sys.executable, "-m", "fedcore.cli", "tune", str(study), "--workers", "2"]
    proc = subprocess.Popen(line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    client = store_client(env["MLFLOW_TRACKING_URI"])
    _wait_for(proc, client, "tags.`fedcore.role` = 'trial' and attributes.status = 'RUNNING' "
              "and metrics.`train/loss` > -1", 2)
    servers = children(proc.pid)
    err, seconds = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err[-3000:]
    assert err.rstrip().splitlines()[-1].startswith("fedcore: stopped by SIGTERM;"), err[-2000:]
    assert not outlived(servers), "the temporary Prefect server outlived tune"
    assert not _runs(client, "attributes.status = 'RUNNING'")
    trials = _runs(client, "tags.`fedcore.role` = 'trial'")
    assert len(trials) == 2  # no trial started after the signal
    for run in trials:
        assert run.info.status == "KILLED" and run.data.tags["trial_state"] == "FAIL"
    (parent,) = _runs(client, "tags.`fedcore.role` = 'study'")
    assert parent.info.status == "KILLED"
    stored = optuna.load_study(study_name="stop", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert sorted(t.state.name for t in stored.trials) == ["FAIL", "FAIL"]
    print(f"tune: exited {seconds:.1f} s after SIGTERM")
