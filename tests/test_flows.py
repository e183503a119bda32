"""Prefect flows run for real (ephemeral test server) against a real MLflow SQLite store."""

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)


def _sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny",
        "grid": {"method": ["fedavg", "fedavgm"], "dataset.alpha": [0.5]},
        "set": {"rounds": 2, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 2},
    }))
    return path


def test_sweep_runs_cells_nested_and_skips_finished_on_rerun(prefect_harness, tracking, tmp_path):
    from fedcore.flows.sweep import sweep

    path = _sweep_file(tmp_path)
    first = sweep(str(path))
    assert [r["status"] for r in first] == ["finished", "finished"]
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    parents = client.search_runs([exp], "tags.`fedcore.role` = 'sweep'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'")
    assert sorted(c.data.tags["method"] for c in children) == ["fedavg", "fedavgm"]
    assert all(c.data.tags["sweep"] == "tiny" for c in children)
    # a sweep cell records its table but no per-run figures (the sweep's report draws them)
    names = {a.path for a in client.list_artifacts(children[0].info.run_id)}
    assert "per_client.parquet" in names and not names & {"curves.png", "fairness.png"}

    second = sweep(str(path))
    assert [r["status"] for r in second] == ["skipped", "skipped"]
    assert [r["run_id"] for r in second] == [r["run_id"] for r in first]
    assert len(client.search_runs([exp], "tags.`fedcore.role` = 'sweep'")) == 1
    assert len(client.search_runs([exp], "attributes.status = 'FINISHED'")) == 3

    third = sweep(str(path), ["rounds=3"])
    assert [r["status"] for r in third] == ["finished", "finished"]


def test_simulate_flow_records_one_run(prefect_harness, tracking):
    from fedcore.flows.simulate import simulate

    out = simulate(None, ["rounds=2", "model.name=mlp", "dataset.num_clients=6",
                          "clients_per_round=2"])
    client = MlflowClient(tracking.tracking_uri)
    run = client.get_run(out["run_id"])
    assert run.info.status == "FINISHED"
    assert out["final/accuracy"] == run.data.metrics["final/accuracy"]
