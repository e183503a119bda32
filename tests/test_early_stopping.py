"""Callbacks from the config: early stopping on a validation metric ends a run FINISHED with its
reason (a sweep rerun skips it), a pause stays resumable and the resumed run restores the
callback's state; the validation split and its metrics."""

from __future__ import annotations

import pytest
import yaml

from fedcore.core.callbacks import Callback, RoundVerdict
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.round.simulation import Simulation

from .conftest import TINY

EARLY = [*TINY, "rounds=10", "local.epochs=1", "dataset.val_fraction=0.2",
         "callbacks=[{callback: early_stopping, patience: 2, monitor: val/loss, mode: min}]"]


def test_a_test_set_monitor_and_a_missing_validation_split_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^callbacks\[0\]\.monitor: early stopping monitors "
                       r"a validation metric, never the test set; allowed: val/accuracy, "
                       r"val/loss \(got 'test/accuracy'\)$"):
        load_config(None, [*TINY, "dataset.val_fraction=0.2",
                           "callbacks=[{callback: early_stopping, monitor: test/accuracy}]"])
    with pytest.raises(ConfigError, match=r"^dataset\.val_fraction: early_stopping monitors "
                       r"val/accuracy, which needs a validation split"):
        load_config(None, [*TINY, "callbacks=[{callback: early_stopping}]"])
    with pytest.raises(ConfigError, match=r"^callbacks\[0\]\.callback: unknown 'nope'"):
        load_config(None, [*TINY, "callbacks=[{callback: nope}]"])
    with pytest.raises(ConfigError, match=r"^callbacks\[0\]\.patience: "):
        load_config(None, [*TINY, "dataset.val_fraction=0.2",
                           "callbacks=[{callback: early_stopping, patience: 0}]"])


def test_no_callbacks_and_no_validation_split_leave_the_config_hash_alone():
    plain = load_config(None, TINY)
    same = load_config(None, [*TINY, "callbacks=[]", "dataset.val_fraction=0"])
    assert same.config_hash() == plain.config_hash()
    assert "callbacks" not in same.resolved() and "val_fraction" not in same.resolved()["dataset"]
    assert load_config(None, EARLY).resolved()["callbacks"] == [
        {"callback": "early_stopping", "patience": 2, "monitor": "val/loss", "mode": "min",
         "min_delta": 0.0}]


def test_the_validation_split_is_held_out_of_the_test_set_and_measured():
    cfg = load_config(None, [*TINY, "rounds=1", "local.epochs=1", "dataset.val_fraction=0.25"])
    plain = Simulation(load_config(None, [*TINY, "rounds=1", "local.epochs=1"]))
    sim = Simulation(cfg)
    n = len(plain.data.y_test)
    assert sim.data.y_val is not None and len(sim.data.y_val) == round(n * 0.25)
    assert len(sim.data.y_val) + len(sim.data.y_test) == n
    row = sim.run().history[-1]
    assert 0.0 <= row["val/accuracy"] <= 1.0 and row["val/loss"] > 0
    assert "val/accuracy" not in plain.run().history[-1]


def test_early_stopping_from_the_config_finishes_the_run_with_its_reason():
    result = Simulation(load_config(None, EARLY)).run()
    assert result.stopped is None
    assert result.converged is not None and result.converged.startswith(
        "early_stopping: val/loss did not improve for 2 evaluations")
    assert len(result.history) == 3 < 10  # best at round 1, no improvement at 2 and 3


class _PauseAfter(Callback):
    def __init__(self, round):
        self.round = round

    def on_round_end(self, record):
        return RoundVerdict(stop="paused") if record.round == self.round else None


def test_a_paused_run_resumes_with_its_callback_state(tmp_path):
    cfg = load_config(None, [*EARLY, "checkpoint_every=1", f"checkpoint_dir={tmp_path}"])
    whole = Simulation(cfg).run()
    first = Simulation(cfg, callbacks=[_PauseAfter(2)])
    paused = first.run()
    assert paused.stopped == "paused" and paused.converged is None
    saved = first.configured[0].state_dict()
    assert saved["bad"] == 1 and saved["best_round"] == 1
    again = Simulation(cfg)
    assert again.configured[0].state_dict()["bad"] == 0
    assert again.resume()
    assert again.configured[0].state_dict() == saved
    resumed = again.run()
    assert resumed.converged == whole.converged
    assert [h["round"] for h in resumed.history] == [h["round"] for h in whole.history]


def test_a_sweep_rerun_skips_the_early_stopped_cell(tracking, tmp_path):
    from fedcore.flows.sweep import _simulate_cell
    from fedcore.specs.sweep import load_sweep
    from fedcore.tracking import get_experiment_id, mlflow_client
    from fedcore.tracking.mlflow_tracker import CONVERGED_TAG
    from fedcore.tracking.writers import wait_for_runs

    path = tmp_path / "early.yaml"
    fixed = dict(item.split("=", 1) for item in EARLY if not item.startswith("callbacks"))
    path.write_text(yaml.safe_dump({
        "name": "early", "set": {k: yaml.safe_load(v) for k, v in fixed.items()},
        "grid": {"callbacks": [[{"callback": "early_stopping", "patience": 2,
                                 "monitor": "val/loss", "mode": "min"}]]}}))
    (cell,) = load_sweep(path).cells
    client = mlflow_client(tracking)
    parent = client.create_run(get_experiment_id(client, tracking)).info.run_id
    first = _simulate_cell(cell.config.resolved(), parent, "early", tracking, 1, False, False, {})
    wait_for_runs()
    run = client.get_run(first["run_id"])
    assert first["status"] == "finished" and run.info.status == "FINISHED"
    assert run.data.tags[CONVERGED_TAG].startswith("early_stopping: val/loss did not improve")
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 3
    again = _simulate_cell(cell.config.resolved(), parent, "early", tracking, 1, False, False, {})
    assert again["status"] == "skipped" and again["run_id"] == first["run_id"]


def test_a_validation_split_of_own_data_is_refused():
    from fedcore.core.data.federated import build_federated_data

    cfg = load_config(None, [*TINY, "dataset.val_fraction=0.2"])
    other = load_config(None, [*TINY, "seed=1"])
    data = build_federated_data(other.dataset, 1, "cpu")
    with pytest.raises(ConfigError, match=r"^dataset\.val_fraction: fedcore holds a validation "
                       r"split out of a built-in dataset's test split, not out of own data"):
        Simulation(cfg, data=data)
