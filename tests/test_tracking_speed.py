"""Tracking off the training path: a killed run keeps its rounds, background run ends, shared
datasets and clients."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from mlflow.tracking import MlflowClient

from fedcore.core.compose.configure import load_config
from fedcore.core.data.federated import build_federated_data, shared_federated_data
from fedcore.core.round.simulation import Simulation
from fedcore.tracking import mlflow_client
from fedcore.tracking.runner import run_tracked
from fedcore.tracking.writers import wait_for_runs

from .conftest import TINY

ROOT = Path(__file__).resolve().parents[1]

KILLED_RUN = textwrap.dedent("""
    import os, signal, sys, time
    from fedcore.core.callbacks import Callback
    from fedcore.core.compose.configure import load_config
    from fedcore.tracking import mlflow_tracker
    from fedcore.tracking.runner import run_tracked

    KILL_AT = int(sys.argv[1])
    mlflow_tracker.METRICS_EVERY_S = float(sys.argv[2])
    SLOW_ROUND = int(sys.argv[3])  # this round lasts longer than METRICS_EVERY_S

    class KillAt(Callback):
        def on_round_end(self, record):
            if record.round == SLOW_ROUND:
                time.sleep(mlflow_tracker.METRICS_EVERY_S + 0.2)
            if record.round == KILL_AT:  # SIGKILL: no handler, no flush, no atexit
                os.kill(os.getpid(), signal.SIGKILL)

    cfg = load_config(None, ["rounds=12", "model.name=mlp", "dataset.num_clients=6",
                             "clients_per_round=3", "local.epochs=1"])
    run_tracked(cfg, callbacks=[KillAt()])
""")


def _killed_at_7(tmp_path: Path, every_s: float, slow_round: int) -> None:
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), "7", str(every_s), str(slow_round)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def test_rounds_older_than_the_hand_over_interval_survive_a_kill(tracking, tmp_path):
    """Round 1 is handed over at once; rounds 2-4 are short; round 5 lasts longer than
    METRICS_EVERY_S, so rounds 2-5 are handed over together at its end; 6 and 7 wait for the
    next hand-over when SIGKILL comes: the store has exactly rounds 1-5, each with all its
    metrics."""
    _killed_at_7(tmp_path, 1.0, 5)
    db = tracking.tracking_uri.removeprefix("sqlite:///")
    with sqlite3.connect(db) as con:
        (run_id,), = con.execute("SELECT run_uuid FROM runs").fetchall()
        per_step = dict(con.execute(
            "SELECT step, COUNT(*) FROM metrics WHERE run_uuid = ? AND key NOT LIKE 'system/%' "
            "GROUP BY step", (run_id,)).fetchall())
    assert set(per_step) == {1, 2, 3, 4, 5}, per_step
    assert len(set(per_step.values())) == 1 and per_step[1] >= 10, per_step


def test_a_killed_run_keeps_every_round_before_the_last(tracking, tmp_path):
    """With every round handed over at its end (METRICS_EVERY_S = 0), SIGKILL at the end of
    round 7, before the tracker (the last callback) hands it over: rounds 1-5 are in the store
    with all their metrics (the writer has at most one write in flight, round 6); the run is
    left RUNNING."""
    _killed_at_7(tmp_path, 0.0, 0)
    db = tracking.tracking_uri.removeprefix("sqlite:///")
    with sqlite3.connect(db) as con:
        (run_id, status), = con.execute("SELECT run_uuid, status FROM runs").fetchall()
        per_step = dict(con.execute(
            "SELECT step, COUNT(*) FROM metrics WHERE run_uuid = ? AND key NOT LIKE 'system/%' "
            "GROUP BY step", (run_id,)  # a slow (loaded) run gets system samples, at step 0
        ).fetchall())
    assert status == "RUNNING"
    assert {1, 2, 3, 4, 5} <= set(per_step), per_step
    assert max(per_step) <= 6
    full = per_step[1]
    assert full >= 10 and all(per_step[s] == full for s in per_step), per_step
    history = MlflowClient(tracking.tracking_uri).get_metric_history(run_id, "test/accuracy")
    assert {m.step for m in history} >= {1, 2, 3, 4, 5}


def test_run_end_in_the_background_finishes_with_artifacts(tracking):
    cfg = load_config(None, TINY)
    run_id, result = run_tracked(cfg, wait=False)
    wait_for_runs()
    client = MlflowClient(tracking.tracking_uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["final/accuracy"] == result.summary["final/accuracy"]
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "per_client.parquet", "curves.png", "fairness.png"} <= names
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [1, 2, 3]


def test_shared_data_is_built_once_and_gives_the_same_numbers():
    cfg = load_config(None, TINY)
    shared = shared_federated_data(cfg.dataset, cfg.seed, "cpu", cfg.clients)
    assert shared_federated_data(cfg.dataset, cfg.seed, "cpu", cfg.clients) is shared
    other = load_config(None, [*TINY, "dataset.alpha=1.0"])
    assert shared_federated_data(other.dataset, other.seed, "cpu", other.clients) is not shared
    fresh = build_federated_data(cfg.dataset, cfg.seed, "cpu", cfg.clients)
    def numbers(data):
        history = Simulation(cfg, data=data).run().history
        return [{k: v for k, v in h.items() if k != "agg/seconds"} for h in history]

    assert numbers(shared) == numbers(shared) == numbers(fresh)
    assert all(torch.equal(a.x_train, b.x_train) for a, b in zip(shared.clients, fresh.clients,
                                                                    strict=True))


def test_one_mlflow_client_per_store(tracking):
    a, b = mlflow_client(tracking), mlflow_client(tracking)
    assert a._client is b._client
