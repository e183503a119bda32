"""Optuna studies for real: SQLite storage, nested MLflow runs, pruning, resume, two processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.component.seeding import TUNING_SEED_MIN
from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError
from fedcore.specs.objective import trial_value
from fedcore.specs.study import load_study, study_names

SET = {"model.name": "mlp", "rounds": 2, "dataset.num_clients": 6, "clients_per_round": 3,
       "seed": TUNING_SEED_MIN}


def _study(tmp_path: Path, name: str = "tiny", **over) -> Path:
    spec = {
        "name": name,
        "set": {"method": "fedquad", **SET},
        "search": {
            "method.client.m1": {"type": "float", "low": 0.2, "high": 1.9},
            "method.client.beta": {"type": "float", "low": 0.1, "high": 4.0, "log": True},
        },
        "metric": "final/accuracy",
        "n_trials": 3,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        **over,
    }
    spec["set"] = {"seed": TUNING_SEED_MIN, **spec["set"]}  # a tuning seed unless one is given
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _runs(tracking, query: str):
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    return client, client.search_runs([exp], query)


def test_shipped_studies_validate():
    assert {"fedquad_margins", "sapef_alpha", "crf_labels", "craft_server_lr",
            "fairness_pareto", "fedavg_lr"} <= set(study_names())
    for name in study_names():
        spec = load_study(name)
        assert spec.storage.endswith("/optuna.db") and spec.n_trials
    assert load_study("fairness_pareto").sampler["type"] == "nsga2"


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"search": {"method.client.m3": {"type": "float", "low": 0, "high": 1}}},
         r"method\.client\.m3: unknown key; allowed: beta, m1, m2"),
        ({"search": {"local.lr": {"type": "float", "low": 0.5, "high": 0.1}}},
         r"study\.search\.local\.lr: low=0\.5 > high=0\.1"),
        ({"metric": "final/acc"}, r"study\.metric: unknown metric 'final/acc'; allowed: final/"),
        ({"search": {"local.epochs": {"type": "categorical", "choices": []}}},
         r"study\.search\.local\.epochs\.choices: expected a non-empty list"),
        ({"metric": ["final/accuracy", "final/loss"], "direction": ["maximize"]},
         r"study\.direction: 1 direction\(s\) for 2 metric\(s\)"),
        ({"search": {"method.client.m1": {"type": "float", "low": 0.5, "high": 9.0}}},
         r"study\.search\.method\.client\.m1=9\.0: method\.client\.m1: .*less than 2"),
        ({"pruner": {"type": "median"}, "direction": "minimize"},
         r"study\.pruner\.metric: test/accuracy improves by maximize"),
        ({"sampler": {"type": "cmaes"}}, r"study\.sampler\.type: unknown 'cmaes'; allowed: tpe"),
        ({"pruner": {"type": "percentile", "percentile": 100}},
         r"study\.pruner\.percentile: expected a number in \(0, 100\) \(got 100\)"),
        ({"heartbeat": {"interval": 0}}, r"study\.heartbeat\.interval: expected an int >= 1"),
        ({"heartbeat": {"interval": 60}},
         r"study\.heartbeat\.grace_period: expected more than interval=60 s \(got 60\)"),
        ({"heartbeat": {"every": 5}},
         r"study\.heartbeat: unknown key 'every'; allowed: interval, grace_period, max_retry"),
    ],
)
def test_bad_studies_fail_in_one_line_before_any_trial(tmp_path, over, match):
    path = _study(tmp_path, **over)
    with pytest.raises(ConfigError, match=match) as info:
        load_study(path)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "optuna.db").exists()


@pytest.mark.slow
def test_validation_does_not_import_optuna(tmp_path):
    code = ("import sys; from fedcore.specs.study import load_study; "
            f"load_study({str(_study(tmp_path))!r}); assert 'optuna' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_cli_bad_override_exits_2(tmp_path, capsys):
    from fedcore.cli import main

    assert main(["tune", str(_study(tmp_path)), "n_trials=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: study.n_trials") and "\n" not in err
    assert main(["tune", str(_study(tmp_path)), "heartbeat.max_retry=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "fedcore: error: study.heartbeat.max_retry: expected an int >= 0 (got -1)"
    assert not (tmp_path / "optuna.db").exists()


@pytest.mark.slow
def test_study_nested_runs_resume_and_best_yaml_reproduces(tracking, tmp_path, capsys):
    import optuna

    from fedcore.cli import main
    from fedcore.core.round.simulation import run

    path = _study(tmp_path)
    assert main(["tune", str(path)]) == 0
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.load_study(study_name="tiny", storage=storage)
    first = {t.number: t.values for t in study.trials}
    assert sorted(first) == [0, 1, 2]
    assert all(t.state.name == "COMPLETE" for t in study.trials)

    client, parents = _runs(tracking, "tags.`fedcore.role` = 'study'")
    assert len(parents) == 1 and parents[0].data.tags["study"] == "tiny"
    parent = parents[0].info.run_id
    _, children = _runs(tracking, f"tags.`mlflow.parentRunId` = '{parent}'")
    assert len(children) == 3
    by_number = {int(c.data.tags["trial_number"]): c for c in children}
    for trial in study.trials:
        child = by_number[trial.number]
        assert child.info.status == "FINISHED" and child.data.tags["trial_state"] == "COMPLETE"
        assert float(child.data.params["method.client.m1"]) == trial.params["method.client.m1"]
        assert float(child.data.params["method.client.beta"]) == trial.params["method.client.beta"]
        # the score: the mean test accuracy of the last average_last (5) evaluations
        accs = [m.value for m in client.get_metric_history(child.info.run_id, "test/accuracy")]
        assert trial.value == float(np.mean(accs[-5:]))
        assert len(client.get_metric_history(child.info.run_id, "test/accuracy")) == 2
    artifacts = {a.path for a in client.list_artifacts(parent)}
    assert {"methods", "experiments", "optimization_history.png",
            "param_importances.png"} <= artifacts

    # resume: same name, one more trial; the first three are untouched, one parent run
    assert main(["tune", str(path), "n_trials=1"]) == 0
    study = optuna.load_study(study_name="tiny", storage=storage)
    assert len(study.trials) == 4
    assert {t.number: t.values for t in study.trials if t.number < 3} == first
    assert len(_runs(tracking, "tags.`fedcore.role` = 'study'")[1]) == 1
    assert len(_runs(tracking, f"tags.`mlflow.parentRunId` = '{parent}'")[1]) == 4

    # --best writes a method YAML that loads by itself and reproduces the trial's metric
    capsys.readouterr()
    assert main(["tune", "--best", str(path), "--out", str(tmp_path / "out")]) == 0
    assert f"trial {study.best_trial.number}" in capsys.readouterr().out
    method = yaml.safe_load((tmp_path / "out" / "methods" / "tiny_best.yaml").read_text())
    assert method["name"] == "tiny_best"
    assert method["client"]["m1"] == study.best_params["method.client.m1"]
    cfg = build_config({}, {**SET, "method": method})
    result = run(cfg)
    assert trial_value("final/accuracy", result.history, result.summary, 5) == study.best_value
    experiment = yaml.safe_load((tmp_path / "out" / "experiments" / "tiny_best.yaml").read_text())
    assert build_config(experiment).config_hash() == cfg.config_hash()


@pytest.mark.slow
def test_pruned_trial_is_pruned_in_optuna_and_killed_in_mlflow(tracking, tmp_path):
    import optuna

    from fedcore.tuning.study import tune

    # accuracy after a round is always below 1.0, so the threshold pruner stops at round 1;
    # one choice: both trials have the same config, and each still gets its own run
    path = _study(tmp_path, n_trials=2,
                  pruner={"type": "threshold", "lower": 1.0, "n_warmup_steps": 0},
                  set={"method": "fedquad", **SET, "rounds": 3},
                  search={"method.client.m1": {"type": "categorical", "choices": [1.5]}})
    study, outcomes = tune(load_study(path))
    assert [o.state for o in outcomes] == ["PRUNED", "PRUNED"]
    assert len({o.run_id for o in outcomes}) == 2
    client = MlflowClient(tracking.tracking_uri)
    for trial, outcome in zip(study.trials, outcomes, strict=True):
        assert trial.state == optuna.trial.TrialState.PRUNED
        assert list(trial.intermediate_values) == [1]
        run = client.get_run(outcome.run_id)
        assert run.info.status == "KILLED"
        assert run.data.tags["trial_state"] == "PRUNED"
        assert run.data.tags["trial_number"] == str(trial.number)
        assert len(client.get_metric_history(run.info.run_id, "test/accuracy")) == 1


@pytest.mark.slow
def test_two_processes_share_one_sqlite_study(tracking, tmp_path):
    import optuna

    path = _study(tmp_path, name="shared", n_trials=2)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "fedcore.cli", "tune", str(path)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    study = optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    numbers = [t.number for t in study.trials]
    assert sorted(numbers) == [0, 1, 2, 3]
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    _, trial_runs = _runs(tracking, "tags.`fedcore.role` = 'trial' and tags.study = 'shared'")
    assert sorted(int(r.data.tags["trial_number"]) for r in trial_runs) == [0, 1, 2, 3]


@pytest.mark.slow
def test_two_objective_flow_gives_a_pareto_front(prefect_harness, tracking, tmp_path):
    from fedcore.flows.tune import tune
    from fedcore.tuning.results import best_trials, write_best
    from fedcore.tuning.study import load_existing

    path = _study(
        tmp_path, name="pareto", n_trials=3, metric=["final/accuracy", "final/accuracy_worst10"],
        direction=["maximize", "maximize"], sampler={"type": "nsga2", "seed": 1},
        set={"method": "qfedavg", **SET},
        search={"method.aggregator.q": {"type": "float", "low": 0.0, "high": 5.0}},
    )
    rows = tune(str(path), max_workers=2)
    assert sorted(r["number"] for r in rows) == [0, 1, 2]
    assert all(r["state"] == "COMPLETE" and len(r["values"]) == 2 for r in rows)
    spec = load_study(path)
    study = load_existing(spec)
    front = best_trials(study)
    assert front
    written = write_best(study, spec, tmp_path / "out")
    assert [p.stem for _, p, _ in written] == [f"pareto_pareto_t{t.number}" for t in front]
    for _, method_path, _ in written:
        build_config({}, {**SET, "method": yaml.safe_load(method_path.read_text())})
    client, parents = _runs(tracking, "tags.`fedcore.role` = 'study' and tags.study = 'pareto'")
    assert parents[0].info.status == "FINISHED"
    assert "pareto_front.png" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}
