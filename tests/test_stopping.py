"""A requested stop ends the round loop at a round boundary: the run is KILLED with its rounds,
a checkpoint of the stop's round is written, and resuming from it equals not stopping. The
signals themselves are sent to real processes in test_reliability_stop.py."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from fedcore.core.callbacks import Callback
from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation
from fedcore.core.runtime import stopping
from fedcore.tracking.runner import run_tracked

FAST = ["model.name=mlp", "dataset.num_clients=6", "clients_per_round=3", "local.epochs=1",
        "local.steps=2", "rounds=5"]


class StopAfter(Callback):
    """Requests a stop (as the signal handler would) when round ``r`` ends."""

    def __init__(self, r: int) -> None:
        self.r = r
        self.stop = False

    def on_run_start(self, sim):
        pass

    def on_round_end(self, record):
        self.stop = self.stop or record.round == self.r

    def on_run_end(self, result):
        pass


def test_a_stop_ends_the_loop_after_the_round_in_flight_with_a_checkpoint(tmp_path):
    """Stopped after round 2 of 5 with checkpoint_every=4: round 2 is checkpointed anyway, and
    resuming from it gives the numbers of an unbroken run."""
    cfg = load_config(None, [*FAST, "checkpoint_every=4", f"checkpoint_dir={tmp_path / 'ck'}"])
    stop = StopAfter(2)
    sim = Simulation(cfg, [stop])
    with stopping.also_when(lambda: stop.stop, "test"), pytest.raises(stopping.StopRequested) as e:
        sim.run()
    assert str(e.value) == "stopped by test after round 2" and e.value.run_status == "KILLED"
    assert sim.round == 2 and [h["round"] for h in sim.history] == [1, 2]
    assert not stopping.requested()  # the check belonged to the block, not to the process
    resumed = Simulation(cfg)
    assert resumed.resume() and resumed.round == 2
    result = resumed.run()
    full = Simulation(load_config(None, FAST)).run()
    assert _numbers(result.history) == _numbers(full.history)
    assert result.summary == full.summary


def _numbers(history):
    return [{k: v for k, v in h.items() if k != "agg/seconds"} for h in history]


def test_a_stopped_tracked_run_is_killed_with_its_rounds(tracking, tmp_path):
    cfg = load_config(None, FAST)
    stop = StopAfter(3)
    with stopping.also_when(lambda: stop.stop, "SIGTERM"), pytest.raises(stopping.StopRequested):
        run_tracked(cfg, callbacks=[stop])
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (run,) = client.search_runs([exp])
    assert run.info.status == "KILLED"
    assert run.data.tags["failure_reason"] == "StopRequested: stopped by SIGTERM after round 3"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]
    with stopping.also_when(lambda: True, "SIGTERM"), pytest.raises(stopping.StopRequested):
        run_tracked(cfg)  # once stopped, no new run starts
    assert len(client.search_runs([exp])) == 1


def test_a_stopped_single_process_study_fails_its_trial_and_kills_its_parent(tracking, tmp_path):
    import optuna
    import yaml

    from fedcore.specs.study import load_study
    from fedcore.tuning.study import tune

    path = tmp_path / "stop.yaml"
    path.write_text(yaml.safe_dump({
        "name": "stop", "set": {"method": "fedavg", **dict(o.split("=") for o in FAST),
                                "seed": 1000},
        "search": {"local.lr": {"type": "float", "low": 0.01, "high": 0.1}},
        "metric": "final/accuracy", "n_trials": 3,
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}"}))
    calls = []

    def mid_trial():  # asked before the trial, the run, its first round and each round's end
        calls.append(1)
        return len(calls) >= 7

    with stopping.also_when(mid_trial, "SIGTERM"):
        study, outcomes = tune(load_study(path))
    assert outcomes == [] and [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (parent,) = client.search_runs([exp], "tags.`fedcore.role` = 'study'")
    (trial,) = client.search_runs([exp], "tags.`fedcore.role` = 'trial'")
    assert parent.info.status == "KILLED"
    assert trial.info.status == "KILLED" and trial.data.tags["trial_state"] == "FAIL"
    steps = [m.step for m in client.get_metric_history(trial.info.run_id, "train/loss")]
    assert steps == list(range(1, len(steps) + 1)) and 1 <= len(steps) < 5


def test_a_sweep_cell_asks_the_dask_scheduler_at_most_every_poll_interval():
    """``at_most_every``: asked on the first call, then only once the interval has passed (False
    in between, so a stop waits at most that long); a True answer is kept without asking."""
    from fedcore.flows.stopping import at_most_every

    now, asked, answer = [0.0], [], [False]

    def check():
        asked.append(now[0])
        return answer[0]

    throttled = at_most_every(0.5, check, clock=lambda: now[0])
    for t in (0.0, 0.1, 0.49, 0.5, 0.7, 1.0):
        now[0] = t
        assert throttled() is False
    assert asked == [0.0, 0.5, 1.0]
    answer[0], now[0] = True, 1.2
    assert throttled() is False and asked == [0.0, 0.5, 1.0]  # not asked yet: 0.2 s since
    now[0] = 1.5
    assert throttled() is True and throttled() is True and asked == [0.0, 0.5, 1.0, 1.5]
