"""A study scores a trial on its declared endpoint, the mean of the metric over the last k
evaluations (``average_last``), and its pruner can watch a personalised method's personal
models (issue 33)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from fedcore.core.component.seeding import TUNING_SEED_MIN
from fedcore.core.config import ConfigError
from fedcore.specs.objective import trial_value
from fedcore.specs.study import load_study, study_names

SET = {"model.name": "mlp", "dataset.num_clients": 6, "clients_per_round": 3,
       "seed": TUNING_SEED_MIN}


def _study(tmp_path: Path, name: str = "endpoint", **over) -> Path:
    spec = {
        "name": name,
        "set": {"method": "fedavg", "rounds": 6, **SET},
        "search": {"local.lr": {"type": "float", "low": 0.02, "high": 0.2, "log": True}},
        "metric": "final/accuracy",
        "n_trials": 2,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        **over,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_trial_value_is_the_mean_of_the_last_k_evaluations():
    history = [{"round": r, "test/accuracy": a, "personal/accuracy_mean": a / 2}
               for r, a in enumerate([0.1, 0.5, 0.2, 0.6, 0.3, 0.7], start=1)]
    history.insert(3, {"round": 3.5})  # a round without evaluation does not count
    summary = {"final/accuracy": 0.7, "auc/accuracy": 0.4}
    assert trial_value("final/accuracy", history, summary, 1) == 0.7
    assert trial_value("final/accuracy", history, summary, 3) == pytest.approx(1.6 / 3)
    assert trial_value("final/accuracy", history, summary, 10) == pytest.approx(2.4 / 6)
    assert trial_value("final/personal_accuracy_mean", history, summary, 2) == pytest.approx(0.25)
    assert trial_value("auc/accuracy", history, summary, 5) == 0.4  # already a run mean


def test_shipped_studies_score_the_last_five_evaluations():
    for name in study_names():
        spec = load_study(name)
        assert spec.average_last == 5, name
        assert all(" mean of last 5" in label for label in spec.objective_labels), name


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "5"])
def test_bad_average_last_is_one_line(tmp_path, bad):
    with pytest.raises(ConfigError, match=r"^study\.average_last: expected an int >= 1") as info:
        load_study(_study(tmp_path, average_last=bad))
    assert "\n" not in str(info.value)


def test_study_scores_trials_on_the_endpoint_in_sqlite(tracking, tmp_path):
    import optuna
    from mlflow.tracking import MlflowClient

    from fedcore.tuning.study import tune

    spec = load_study(_study(tmp_path, average_last=3))
    study, outcomes = tune(spec)
    assert [o.state for o in outcomes] == ["COMPLETE", "COMPLETE"]
    stored = optuna.load_study(study_name="endpoint", storage=spec.storage)
    assert stored.user_attrs["average_last"] == 3
    client = MlflowClient(tracking.tracking_uri)
    differs = False
    for trial, outcome in zip(stored.trials, outcomes, strict=True):
        run = client.get_run(outcome.run_id)
        accs = [m.value for m in client.get_metric_history(outcome.run_id, "test/accuracy")]
        assert len(accs) == 6
        assert trial.value == float(np.mean(accs[-3:]))
        differs |= trial.value != run.data.metrics["final/accuracy"]
    assert differs  # not the final round's accuracy
    parent = client.get_run(outcomes[0].run_id).data.tags["mlflow.parentRunId"]
    assert client.get_run(parent).data.params["objective"] == "test/accuracy mean of last 3"

    # the stored trials keep their score: another average_last on resume is refused
    with pytest.raises(ConfigError, match=r"average_last=3, this file asks for 5; allowed: "):
        tune(load_study(_study(tmp_path, average_last=5)))
    assert len(optuna.load_study(study_name="endpoint", storage=spec.storage).trials) == 2


def test_pruner_watches_the_personal_models(tracking, tmp_path):
    import optuna

    from fedcore.tuning.study import tune

    # the personal models' accuracy is below 1.0 after round 1: the threshold pruner stops there
    path = _study(tmp_path, name="personal", n_trials=1,
                  set={"method": "ditto", "rounds": 3, **SET},
                  metric="final/personal_accuracy_mean",
                  pruner={"type": "threshold", "lower": 1.0, "n_warmup_steps": 0,
                          "metric": "personal/accuracy_mean"})
    study, outcomes = tune(load_study(path))
    assert [o.state for o in outcomes] == ["PRUNED"]
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [1]


def test_pruner_on_personal_metric_needs_personal_models(tmp_path):
    path = _study(tmp_path, pruner={"type": "median", "metric": "personal/accuracy_mean"})
    with pytest.raises(ConfigError, match=r"^study: study\.pruner\.metric: personal/accuracy_mean "
                       r"needs a personalised client algorithm, .*'fedavg'.*allowed: .*ditto"):
        load_study(path)
