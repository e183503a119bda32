"""What every run records besides its metrics: provenance tags, the dataset input with its
partition digest, the final (and personal) models, system metrics; parent-run descriptions."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

import fedcore
from fedcore.core.compose.configure import load_config
from fedcore.core.data.federated import build_federated_data, partition_digest
from fedcore.core.metrics import per_sample_eval
from fedcore.tracking.runner import run_tracked

from .conftest import TINY

ROOT = Path(__file__).resolve().parent.parent


def test_run_records_code_libraries_host_user_and_device(tracking):
    run_id, _ = run_tracked(load_config(None, TINY))
    tags = MlflowClient(tracking.tracking_uri).get_run(run_id).data.tags
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert tags["mlflow.source.git.commit"] == tags["fedcore.git.commit"] == head
    assert tags["fedcore.git.dirty"] in ("true", "false")
    assert tags["mlflow.source.name"] == str(ROOT)
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL"
    assert tags["fedcore.version"] == fedcore.__version__
    assert tags["fedcore.torch_version"] == torch.__version__
    assert tags["fedcore.cuda_version"] == (torch.version.cuda or "none")
    assert tags["fedcore.host"] and tags["device"] == "cpu"
    lock = (ROOT / "requirements" / "lock.txt").read_bytes()
    assert tags["fedcore.lock_digest"] == hashlib.sha256(lock).hexdigest()[:12]
    assert tags["fedcore.env_matches_lock"] == "true" and len(tags["fedcore.env_digest"]) == 12
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
    assert "fedcore/core/data/digits.npz" in json.loads(first.dataset.source)["uri"]
    assert first.dataset.digest == partition_digest(_data())
    tags = {t.key: t.value for t in first.tags}
    assert tags == {"mlflow.data.context": "train", "partition": "dirichlet", "alpha": "0.1",
                    "seed": "0", "clients": "6"}
    assert inputs[1][0].dataset.digest == first.dataset.digest  # same partition
    assert inputs[2][0].dataset.digest != first.dataset.digest  # another seed


def test_final_model_is_an_mlflow_model_with_the_final_accuracy(tracking, tmp_path):
    import mlflow.artifacts
    import mlflow.pytorch
    import yaml

    from fedcore.tracking import load_model

    cfg = load_config(None, TINY)
    run_id, result = run_tracked(cfg)
    data = _data()
    client = MlflowClient(tracking.tracking_uri)
    native = mlflow.pytorch.load_model(f"runs:/{run_id}/model")  # MLFLOW_TRACKING_URI's store
    for model in (native, load_model(run_id)):
        correct, _ = per_sample_eval(model, data.x_test, data.y_test)
        # one sample classified differently would move it by 1/360
        assert abs(float(correct.double().mean()) - result.summary["final/accuracy"]) < 1e-6
    assert type(native) is type(load_model(run_id))  # the fedcore model class itself
    (output,) = client.get_run(run_id).outputs.model_outputs  # the UI's Models column
    logged = client.get_logged_model(output.model_id)
    assert (logged.name, logged.status.name, logged.source_run_id) == ("model", "READY", run_id)
    assert output.step == cfg.rounds
    local = Path(mlflow.artifacts.download_artifacts(logged.artifact_location,
                                                     dst_path=str(tmp_path)))
    meta = yaml.safe_load((local / "MLmodel").read_text())
    assert "pytorch" in meta["flavors"] and "tensor-spec" in meta["signature"]["inputs"]
    assert meta["saved_input_example_info"]["type"] == "ndarray"
    reqs = (local / "requirements.txt").read_text().split()
    assert f"fedcore=={fedcore.__version__}" in reqs and any(r.startswith("torch==") for r in reqs)
    assert not client.list_artifacts(run_id, "model/global.pt")  # no second copy


def test_load_model_still_reads_runs_recorded_before_the_mlflow_model(tracking, tmp_path):
    from fedcore.core.models import build_model
    from fedcore.tracking import get_experiment_id, load_model, mlflow_client

    model = build_model("mlp", (1, 8, 8), 10)
    spec = {"model": "mlp", "norm": "batch", "in_shape": [1, 8, 8], "num_classes": 10,
            "projection_dim": None, "round": 3}
    torch.save({**spec, "state_dict": model.state_dict()}, tmp_path / "global.pt")
    client = mlflow_client(tracking)
    run_id = client.create_run(get_experiment_id(client, tracking)).info.run_id
    client.log_artifact(run_id, str(tmp_path / "global.pt"), "model")
    loaded = load_model(run_id)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(),
                                                 model.state_dict().values(), strict=True))


def test_personal_models_are_logged_for_ditto(tracking):
    from fedcore.core.round.simulation import Simulation
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
    from fedcore.core.config import ConfigError
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
    from fedcore.figures.plots import _pyplot, integer_ticks

    plt = _pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    integer_ticks(ax)
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 4]
    assert ticks and all(float(t).is_integer() for t in ticks)
    plt.close(fig)


def test_a_library_run_records_the_users_script_and_its_commit(tmp_path):
    """`python train.py` calling fedcore: MLflow's Source is train.py and its Version the
    commit of train.py's repository; fedcore's own commit has its own tag."""
    import os
    import sys

    repo = tmp_path / "myproject"
    repo.mkdir()
    script = repo / "train.py"
    script.write_text(
        "from fedcore.api import load_config, run_tracked\n"
        f"run_id, _ = run_tracked(load_config(None, {TINY!r}))\n"
        "print('RUN', run_id)\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "train"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri,
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts")}
    out = subprocess.run([sys.executable, str(script)], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run_id = out.stdout.split("RUN ")[-1].strip()
    tags = MlflowClient(uri).get_run(run_id).data.tags
    assert tags["mlflow.source.name"] == str(script.resolve())
    assert tags["mlflow.source.git.commit"] == commit
    fedcore_head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, check=True).stdout.strip()
    assert tags["fedcore.git.commit"] == fedcore_head
