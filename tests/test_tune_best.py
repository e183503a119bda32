"""`fedcore tune --best` writes the trial's own resolved config: the written experiment
reproduces the trial bit for bit, whatever overrides --best is given; its hints work."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import yaml

from fedcore.cli import main
from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import run
from fedcore.specs.objective import trial_value

ROOT = Path(__file__).resolve().parent.parent


def _score(result):
    """A trial's score: the mean test accuracy of the last 5 evaluations (average_last)."""
    return trial_value("final/accuracy", result.history, result.summary, 5)


def _study(tmp_path: Path) -> Path:
    spec = {
        "name": "exact",
        "set": {"method": "fedquad", "model.name": "mlp", "rounds": 20,
                "dataset.num_clients": 6, "clients_per_round": 3, "seed": 1000},
        "search": {"method.client.m1": {"type": "float", "low": 0.2, "high": 1.9}},
        "metric": "final/accuracy",
        "n_trials": 2,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
    }
    path = tmp_path / "exact.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_best_reproduces_the_trial_run_with_base_overrides(tracking, tmp_path, monkeypatch,
                                                           capsys):
    # a project copy, so that --best without --out writes configs/ there (docs/how-to/tuning.md)
    home = tmp_path / "project"
    shutil.copytree(ROOT / "configs", home / "configs")
    monkeypatch.setenv("FEDCORE_HOME", str(home))
    path = _study(tmp_path)
    # the trials run with rounds=2 and another seed, overrides --best is NOT given again
    assert main(["tune", str(path), "rounds=2", "seed=1003"]) == 0
    study = optuna.load_study(study_name="exact", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    best = study.best_trial
    assert best.user_attrs["config"]["rounds"] == 2
    assert best.user_attrs["mlflow_run_url"].endswith(
        f"/runs/{best.user_attrs['mlflow_run_id']}?workflowType=machine_learning")

    capsys.readouterr()
    assert main(["tune", "--best", str(path)]) == 0
    out = capsys.readouterr().out
    experiment = home / "configs" / "experiments" / "exact_best.yaml"
    method = home / "configs" / "methods" / "exact_best.yaml"
    assert experiment.is_file() and method.is_file()
    assert "# Config: the trial's stored config." in experiment.read_text()
    written = yaml.safe_load(experiment.read_text())
    assert written["rounds"] == 2 and written["seed"] == 1003

    # the written experiment gives the trial's metric bit for bit
    assert _score(run(load_config(str(experiment)))) == best.value
    # the printed hint resolves: method=exact_best selects the tuned method
    assert "method=exact_best" in out
    cfg = load_config(None, ["method=exact_best", "model.name=mlp", "rounds=2", "seed=1003",
                             "dataset.num_clients=6", "clients_per_round=3"])
    assert cfg.method.client["m1"] == best.params["method.client.m1"]
    assert _score(run(cfg)) == best.value


def test_best_with_out_prints_a_hint_that_resolves(tracking, tmp_path, capsys):
    path = _study(tmp_path)
    assert main(["tune", str(path), "rounds=2", "n_trials=1"]) == 0
    capsys.readouterr()
    assert main(["tune", "--best", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    method_file = tmp_path / "out" / "methods" / "exact_best.yaml"
    hint = f'method="$(cat {method_file})"'
    assert hint in out
    # what the shell passes for that hint: the file's text as the value of method=
    cfg = load_config(None, ["method=" + method_file.read_text(), "model.name=mlp",
                             "dataset.num_clients=6", "clients_per_round=3"])
    assert cfg.method.name == "exact_best"
    assert cfg.method.client == yaml.safe_load(method_file.read_text())["client"]
