"""MLflow contents after a run, and the command line's handling of bad input."""

import subprocess
import sys

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.compose.configure import load_config
from fedcore.tracking.runner import run_tracked

from .conftest import TINY

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)

PER_ROUND = ["test/accuracy", "test/loss", "clients/accuracy_mean", "clients/accuracy_std",
             "clients/accuracy_worst10", "clients/accuracy_best10", "clients/jain_index",
             "train/loss", "agg/conflict_fraction", "agg/seconds", "comm/bytes_up",
             "comm/bytes_up_total"]
SUMMARY = ["final/accuracy", "final/accuracy_worst10", "final/accuracy_std", "auc/accuracy"]


def test_mlflow_run_has_params_tags_metrics_and_artifacts(tracking, tmp_path):
    cfg = load_config(None, TINY)
    run_id, result = run_tracked(cfg)
    client = MlflowClient(tracking.tracking_uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["method"] == "fedavg" and tags["dataset"] == "digits"
    assert tags["alpha"] == "0.1" and tags["seed"] == "0"
    assert tags["config_hash"] == cfg.config_hash()
    params = run.data.params
    assert params["seed"] == "0" and params["local.lr"] == "0.05"
    assert params["method.aggregator.rule"] == "fedavg" and params["rounds"] == "3"
    for name in PER_ROUND:
        history = client.get_metric_history(run_id, name)
        assert [m.step for m in history] == [1, 2, 3], name
    for name in SUMMARY:
        assert name in run.data.metrics
    assert run.data.metrics["final/accuracy"] == result.summary["final/accuracy"]
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "per_client.parquet", "curves.png", "fairness.png"} <= names
    local = client.download_artifacts(run_id, "", str(tmp_path))
    assert yaml.safe_load(open(f"{local}/config.yaml")) == cfg.resolved()
    frame = pd.read_parquet(f"{local}/per_client.parquet")
    assert list(frame.columns) == ["round", "client_id", "accuracy", "loss", "num_samples",
                                   "sampled", "byzantine", "noisy"]
    assert len(frame) == 3 * 6 and frame.groupby("round").sampled.sum().tolist() == [3, 3, 3]
    assert open(f"{local}/curves.png", "rb").read(4) == b"\x89PNG"


def test_failed_run_is_marked_failed_with_reason(tracking, monkeypatch):
    from fedcore.core.round import simulation

    def boom(self, round, sampled=None, order=None):
        raise FloatingPointError("diverged")

    monkeypatch.setattr(simulation.Simulation, "play_round", boom)
    with pytest.raises(FloatingPointError):
        run_tracked(load_config(None, TINY))
    client = MlflowClient(tracking.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(tracking.experiment).experiment_id])
    assert runs[0].info.status == "FAILED"
    assert "diverged" in runs[0].data.tags["failure_reason"]


BAD = [
    (["method=nope"], "method: unknown method 'nope'; allowed: "),
    (["dataset.name=svhn"], "dataset.name:"),
    (["dataset.alpha=0"], "dataset.alpha:"),
    (["clients_per_round=30"], "clients_per_round=30 exceeds dataset.num_clients=20"),
    (["local.lr=-1"], "local.lr:"),
    (["dataset.colour=red"], "dataset.colour: unknown key; allowed: name, root"),
    (["method=fedprox", "method.client.mu=-1"], "method.client.mu:"),
    (["method.aggregator.rule=nope"], "method.aggregator.rule: unknown 'nope'; allowed: "),
]


def _no_runs(tracking) -> bool:
    client = MlflowClient(tracking.tracking_uri)
    return all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_config_is_one_line_error_and_no_run(tracking, capsys, args, message):
    from fedcore.cli import main

    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert _no_runs(tracking)


def test_cli_exit_code_2_without_traceback(tracking):
    proc = subprocess.run([sys.executable, "-m", "fedcore.cli", "run", "dataset.alpha=-1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("fedcore: error: dataset.alpha: Input should be greater "
                                   "than 0 (got -1)")
    assert _no_runs(tracking)


def test_short_rounds_reach_the_store_in_one_batch_and_all_of_them(tracking, monkeypatch):
    """The run's first round reaches MLflow at once (the run shows as training); later rounds
    shorter than METRICS_EVERY_S are handed over together (one log_batch, not one per round),
    and none is missing at the run's end; with the interval at 0 every round is its own batch
    again."""
    from fedcore.tracking import mlflow_tracker
    from fedcore.tracking.run_store import MlflowRunStore

    batches: list[set[int]] = []
    real = MlflowRunStore.log_metrics

    def spy(self, run_id, metrics):
        batches.append({step for _, _, _, step in metrics})
        return real(self, run_id, metrics)

    monkeypatch.setattr(MlflowRunStore, "log_metrics", spy)
    monkeypatch.setattr(mlflow_tracker, "METRICS_EVERY_S", 3600.0)
    cfg = load_config(None, [*TINY, "rounds=4"])
    run_id, _ = run_tracked(cfg)
    assert batches == [{1}, {2, 3, 4}, {4}]  # round 1, the other rounds, the summary
    client = MlflowClient(tracking.tracking_uri)
    assert [m.step for m in client.get_metric_history(run_id, "test/accuracy")] == [1, 2, 3, 4]
    batches.clear()
    monkeypatch.setattr(mlflow_tracker, "METRICS_EVERY_S", 0.0)
    run_tracked(load_config(None, [*TINY, "rounds=4", "seed=1"]))
    assert batches[:4] == [{1}, {2}, {3}, {4}]
