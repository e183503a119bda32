"""What every run records besides its metrics: provenance tags, the dataset input with its
partition digest, the final (and personal) models, system metrics; parent-run descriptions."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

import fedcore
from fedcore.config import load_config
from fedcore.data.federated import build_federated_data, partition_digest
from fedcore.metrics import per_sample_eval
from fedcore.tracking.runner import run_tracked

from .conftest import TINY

ROOT = Path(__file__).resolve().parent.parent


def test_run_records_code_libraries_host_user_and_device(tracking):
    run_id, _ = run_tracked(load_config(None, TINY))
    tags = MlflowClient(tracking.tracking_uri).get_run(run_id).data.tags
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert tags["mlflow.source.git.commit"] == head
    assert tags["fedcore.git.dirty"] in ("true", "false")
    assert tags["mlflow.source.name"] == str(ROOT)
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL"
    assert tags["fedcore.version"] == fedcore.__version__
    assert tags["fedcore.torch_version"] == torch.__version__
    assert tags["fedcore.cuda_version"] == (torch.version.cuda or "none")
    assert tags["fedcore.host"] and tags["device"] == "cpu"
    assert "fedcore.prefect_flow_run_id" not in tags  # not run by Prefect


def _data(*over: str):
    cfg = load_config(None, [*TINY, *over])
    return build_federated_data(cfg.dataset, cfg.seed, "cpu", cfg.clients)


def test_partition_digest_same_partition_same_digest_and_any_change_another():
    base = partition_digest(_data())
    # same partition: other method, model and rounds leave it as it is
    assert partition_digest(_data("method=fedprox", "model.name=cnn", "rounds=7")) == base
    for over in ("seed=1", "dataset.alpha=0.5", "dataset.num_clients=7",
                 "dataset.partition=iid", "dataset.test_fraction=0.3"):
        assert partition_digest(_data(over)) != base, over


def test_dataset_input_on_the_run(tracking):
    client = MlflowClient(tracking.tracking_uri)
    ids = [run_tracked(load_config(None, [*TINY, *over]))[0]
           for over in ([], ["method=fedavgm"], ["seed=1"])]
    inputs = [client.get_run(i).inputs.dataset_inputs for i in ids]
    assert all(len(x) == 1 for x in inputs)
    first = inputs[0][0]
    assert first.dataset.name == "digits"
    assert "fedcore/data/digits.npz" in json.loads(first.dataset.source)["uri"]
    assert first.dataset.digest == partition_digest(_data())
    tags = {t.key: t.value for t in first.tags}
    assert tags == {"mlflow.data.context": "train", "partition": "dirichlet", "alpha": "0.1",
                    "seed": "0", "clients": "6"}
    assert inputs[1][0].dataset.digest == first.dataset.digest  # same partition
    assert inputs[2][0].dataset.digest != first.dataset.digest  # another seed


def test_logged_global_model_loads_with_one_call_and_gives_the_final_accuracy(tracking):
    from fedcore.tracking import load_model

    cfg = load_config(None, TINY)
    run_id, result = run_tracked(cfg)
    model = load_model(run_id)
    data = _data()
    correct, _ = per_sample_eval(model, data.x_test, data.y_test)
    # one sample classified differently would move it by 1/360
    assert abs(float(correct.double().mean()) - result.summary["final/accuracy"]) < 1e-6
    client = MlflowClient(tracking.tracking_uri)
    assert [a.path for a in client.list_artifacts(run_id, "model")] == ["model/global.pt"]


def test_personal_models_are_logged_for_ditto(tracking):
    from fedcore.simulation import Simulation
    from fedcore.tracking import MLflowTracker, load_model

    cfg = load_config(None, [*TINY, "method=ditto"])
    sim = Simulation(cfg)
    tracker = MLflowTracker()
    sim.callbacks = [tracker]
    sim.run()
    trained = [c.client_id for c in sim.data.clients
               if sim.client_algo.personal_params(sim.store[c.client_id]) is not None]
    assert trained
    for k in trained:
        model = load_model(tracker.run_id, client_id=k)
        own = sim.client_algo.personal_params(sim.store[k])[0].cpu()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        assert torch.equal(flat, own)
    untrained = sorted(set(range(cfg.dataset.num_clients)) - set(trained))
    if untrained:
        with pytest.raises(LookupError, match="no personal model"):
            load_model(tracker.run_id, client_id=untrained[0])


def test_system_metrics_on_by_default_and_off_by_switch(tracking):
    from fedcore.tracking.settings import load_settings

    assert load_settings(ROOT / "mlflow.yml").system_metrics is True
    client = MlflowClient(tracking.tracking_uri)
    on, _ = run_tracked(load_config(None, TINY), settings=tracking)
    metrics = client.get_run(on).data.metrics
    assert {"system/cpu_utilization_percentage",
            "system/system_memory_usage_megabytes"} <= set(metrics)
    off, _ = run_tracked(load_config(None, [*TINY, "seed=1"]),
                         settings=replace(tracking, system_metrics=False))
    assert not [k for k in client.get_run(off).data.metrics if k.startswith("system/")]


def test_mlflow_yml_switch_is_validated(tmp_path):
    from fedcore.config import ConfigError
    from fedcore.tracking.settings import load_settings

    (tmp_path / "mlflow.yml").write_text("system_metrics: maybe\n")
    with pytest.raises(ConfigError, match="system_metrics: expected true or false"):
        load_settings(tmp_path / "mlflow.yml")
    (tmp_path / "mlflow.yml").write_text("system_metrics: false\nsystem_metrics_interval: 2\n")
    settings = load_settings(tmp_path / "mlflow.yml")
    assert settings.system_metrics is False and settings.system_metrics_interval == 2.0


def test_per_client_csv_beside_parquet_and_html_report_has_a_charset(tracking, tmp_path):
    import pandas as pd

    run_id, _ = run_tracked(load_config(None, TINY))
    client = MlflowClient(tracking.tracking_uri)
    local = Path(client.download_artifacts(run_id, "", str(tmp_path)))
    csv = pd.read_csv(local / "per_client.csv")
    parquet = pd.read_parquet(local / "per_client.parquet")
    assert list(csv.columns) == list(parquet.columns) and len(csv) == len(parquet)
    assert np.allclose(csv["accuracy"], parquet["accuracy"])

    from fedcore.tracking.parents import html_page

    page = html_page("<table><td>±</td></table>", "t")
    assert '<meta charset="utf-8">' in page and page.startswith("<!DOCTYPE html>")


def test_round_axes_have_integer_ticks(tmp_path):
    from fedcore.tracking.plots import _pyplot, integer_ticks

    plt = _pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    integer_ticks(ax)
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 4]
    assert ticks and all(float(t).is_integer() for t in ticks)
    plt.close(fig)
