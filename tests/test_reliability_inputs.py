"""Bad input the docs promise to refuse: one line, exit code 2, no run, before compute;
runtime failures as one line; method names only inside configs/methods; Krum's notice."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from fedcore.cli import main
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, config_dir
from tests.conftest import TINY
from tests.test_agg_robust import KRUM_POINTS


def _runs(tracking) -> list:
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("override", [
    "dataset.alpha=inf", "local.lr=inf", "local.lr=.nan", "local.momentum=-.inf",
    "clients.attack_strength=.inf", "method.aggregator.server_lr=inf", "target_accuracy=.nan",
])
def test_non_finite_settings_are_refused(capsys, tracking, override):
    err = _refused(capsys, ["run", *TINY, override])
    assert override.split("=")[0] in err and "finite" in err
    assert _runs(tracking) == []


@pytest.mark.parametrize("alpha", ["1.0e+308", "1e7"])
def test_dirichlet_alpha_above_its_maximum_is_refused(capsys, tracking, alpha):
    """alpha=1e308 ran with the split alpha=inf was refused for (one client got 1,078 of
    1,150 samples): numpy's Dirichlet draws overflow to all-zero shares."""
    err = _refused(capsys, ["run", *TINY, f"dataset.alpha={alpha}"])
    assert err.startswith("fedcore: error: dataset.alpha: must be in (0, 1e+06]")
    assert _runs(tracking) == []
    assert load_config(None, [*TINY, "dataset.alpha=1e6"]).dataset.alpha == 1e6


@pytest.mark.parametrize("device", ["cuda:7", "cuda"])
def test_missing_device_is_refused_before_compute(capsys, tracking, device):
    if torch.cuda.device_count() > (7 if device == "cuda:7" else 0):
        pytest.skip(f"this machine has {device}")
    err = _refused(capsys, ["run", *TINY, f"device={device}"])
    assert f"device: {device!r} is not present" in err and "allowed: auto, cpu" in err
    assert _runs(tracking) == []


def test_more_clients_than_samples_is_refused(capsys, tracking):
    err = _refused(capsys, ["run", "model.name=mlp", "dataset.num_clients=5000"])
    assert "dataset.num_clients=5000" in err and "samples available" in err
    assert _refused(capsys, ["run", "model.name=mlp", "dataset.partition=iid",
                             "dataset.num_clients=5000"]).endswith("allowed: 1..1437")
    assert _runs(tracking) == []


def test_sweep_with_missing_dataset_files_is_refused_before_prefect(capsys, tracking, tmp_path):
    path = tmp_path / "nodata.yaml"
    path.write_text(yaml.safe_dump({
        "name": "nodata", "grid": {"dataset.name": ["digits", "mnist"]},
        "set": {"dataset.root": str(tmp_path / "empty"), "dataset.partition": "iid",
                "model.name": "mlp", "rounds": 1},
    }))
    err = _refused(capsys, ["sweep", str(path)])
    assert "dataset 'mnist': files not found in" in err and str(tmp_path / "empty") in err
    assert _runs(tracking) == []  # no parent run, no cell run


def test_study_with_missing_dataset_files_is_refused(capsys, tracking, tmp_path):
    from tests.test_tuning import _study

    path = _study(tmp_path, set={"method": "fedquad", "dataset.name": "cifar10",
                                 "dataset.root": str(tmp_path / "empty"),
                                 "model.name": "mlp", "rounds": 1})
    err = _refused(capsys, ["tune", str(path)])
    assert "dataset 'cifar10': files not found" in err
    assert _runs(tracking) == [] and not (tmp_path / "optuna.db").exists()


@pytest.mark.parametrize("timeout", [".inf", ".nan"])
def test_study_timeout_must_be_finite(tmp_path, timeout):
    from fedcore.specs.study import load_study
    from tests.test_tuning import _study

    with pytest.raises(ConfigError, match="study.timeout: expected a positive finite number"):
        load_study(_study(tmp_path, timeout=yaml.safe_load(timeout)))


DIVERGE = [*TINY, "local.lr=1e6", "local.epochs=1", "local.steps=2"]


def test_runtime_failure_is_one_line_with_run_and_round(capsys, tracking):
    assert main(["run", *DIVERGE]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    (run,) = _runs(tracking)
    assert err.startswith(f"fedcore: error: run {run.info.run_id} failed after round 1: "
                          "FloatingPointError: diverged at round 1")
    assert "--debug" in err


def test_debug_shows_the_traceback(tracking, monkeypatch):
    with pytest.raises(FloatingPointError, match="diverged"):
        main(["--debug", "run", *DIVERGE])
    monkeypatch.setenv("FEDCORE_DEBUG", "1")
    with pytest.raises(FloatingPointError, match="diverged"):
        main(["run", *DIVERGE])


@pytest.mark.parametrize("name", ["../methods/fedavg", "../../etc/passwd", "sub/fedavg",
                                  "..", "~/fedavg"])
def test_method_names_resolve_only_inside_configs_methods(name):
    with pytest.raises(ConfigError, match="is not a method name"):
        load_config(None, [f"method={name}"])


def test_method_file_given_as_a_yaml_path(tmp_path):
    spec = yaml.safe_load((config_dir() / "methods" / "fedprox.yaml").read_text())
    spec.pop("name", None)
    path = tmp_path / "my_prox.yaml"
    path.write_text(yaml.safe_dump(spec))
    cfg = load_config(None, [f"method={path}"])
    assert cfg.method.name == "my_prox" and cfg.method.client["algorithm"] == "fedprox"
    with pytest.raises(ConfigError, match="method file .* does not exist"):
        load_config(None, [f"method={tmp_path / 'absent.yaml'}"])


def test_krum_notes_a_reduced_num_byzantine_once(caplog):
    from fedcore.core.aggregators import build
    from fedcore.core.records.aggregate import UpdateBatch

    agg = build({"rule": "krum", "num_byzantine": 3})
    batch = UpdateBatch(deltas=KRUM_POINTS, num_samples=torch.ones(5))
    with caplog.at_level(logging.WARNING):
        agg.aggregate(batch)
        res = agg.aggregate(batch)
    notes = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert notes == ["krum: num_byzantine=3 needs at least 9 clients per round (m > 2f + 2); "
                     "using f=1 (metric krum/num_byzantine)"]
    assert res.metrics["krum/f_reduced"] == 1.0


def test_docs_say_where_checkpoints_go():
    page = Path(__file__).resolve().parents[1] / "docs" / "explanation" / "reliability.md"
    assert "checkpoint_dir" in page.read_text().split("# Reliability", 1)[1]
