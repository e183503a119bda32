"""An Optuna study tunes under a fixed epsilon: every trial is calibrated to the study's
target, so its trials differ in what is searched, never in privacy."""

from __future__ import annotations

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.component.seeding import TUNING_SEED_MIN
from fedcore.specs.study import load_study


def test_shipped_privacy_study_fixes_epsilon_and_searches_the_clip():
    spec = load_study("dp_fedavg_eps4")
    assert spec.n_trials == 20


def test_every_trial_is_calibrated_to_the_studys_epsilon(tracking, tmp_path):
    from fedcore.cli import main

    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "dp",
        "set": {"method": "fedavg", "model.name": "mlp", "rounds": 3, "dataset.num_clients": 8,
                "clients_per_round": 4, "local.steps": 2, "seed": TUNING_SEED_MIN,
                "privacy.mechanism": "central", "privacy.target_epsilon": 2.0},
        "search": {"privacy.clip": {"type": "float", "low": 0.05, "high": 2.0, "log": True}},
        "metric": "final/accuracy", "n_trials": 2,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
    }, sort_keys=False))
    assert main(["tune", str(path)]) == 0
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    trials = client.search_runs([exp], "tags.trial_number != ''")
    assert len(trials) == 2
    clips = {float(t.data.params["dp.clip"]) for t in trials}
    assert len(clips) == 2  # the searched clip reached the mechanism
    assert {t.data.params["dp.noise_multiplier"] for t in trials} == {
        trials[0].data.params["dp.noise_multiplier"]}  # one privacy level for every trial
    for t in trials:
        eps = t.data.metrics["privacy/epsilon"]
        assert eps <= 2.0 and eps == pytest.approx(2.0, rel=1e-3)
