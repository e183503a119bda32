"""Callbacks return (stop, metrics): a stop ends the run after its round, checkpointed, and a
resume continues to the numbers of an unbroken run; returned metrics reach the history and
MLflow; the built-in callbacks can be replaced or turned off; components contribute theirs."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from fedcore.core import clients
from fedcore.core.callbacks import Callback, RoundVerdict
from fedcore.core.callbacks.configured import ConfiguredCallback
from fedcore.core.callbacks.personal import PersonalEvaluation
from fedcore.core.compose.configure import load_config
from fedcore.core.round import checkpoint
from fedcore.core.round.simulation import Simulation
from fedcore.tracking.runner import run_tracked

from .conftest import TINY

FAST = [*TINY, "local.epochs=1", "local.steps=2"]


class StopAt(Callback):
    """Asks to stop when round ``r`` ends."""

    def __init__(self, r: int) -> None:
        self.r = r

    def on_round_end(self, record):
        return RoundVerdict(stop=f"enough at {record.round}") if record.round == self.r else None


class Adds(Callback):
    """Returns a metric of its own and notes what it saw of the callbacks before it."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_round_end(self, record):
        self.seen.append("test/accuracy" in record.metrics)  # the built-in evaluation's
        return RoundVerdict(metrics={"mine/double_loss": 2 * record.metrics["train/loss"]})


class Reads(Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_round_end(self, record):
        self.values.append(record.metrics["mine/double_loss"])


def _numbers(history):
    return [{k: v for k, v in h.items() if k != "agg/seconds"} for h in history]


def test_a_stop_ends_the_run_after_its_round_checkpointed_and_a_resume_continues(tmp_path):
    cfg = load_config(None, [*FAST, "checkpoint_every=5", f"checkpoint_dir={tmp_path}"])
    stopped = Simulation(cfg, [StopAt(2)]).run()
    assert stopped.stopped == "enough at 2"
    assert [h["round"] for h in stopped.history] == [1, 2]
    assert stopped.summary["final/accuracy"] == stopped.history[-1]["test/accuracy"]
    resumed = Simulation(cfg)
    assert resumed.resume() and resumed.round == 2  # round 2 checkpointed though 2 % 5 != 0
    result = resumed.run()
    full = Simulation(load_config(None, FAST)).run()
    assert result.stopped is None and _numbers(result.history) == _numbers(full.history)
    assert result.summary == full.summary
    assert not checkpoint.run_folder(cfg).exists()  # a finished run's checkpoints go
    last = Simulation(load_config(None, [*FAST, "rounds=1"]), [StopAt(1)]).run()
    assert last.stopped is None  # a stop at the last round changes nothing


def test_returned_metrics_reach_later_callbacks_the_history_and_mlflow(tracking, tmp_path):
    cfg = load_config(None, [*FAST, "checkpoint_every=1", f"checkpoint_dir={tmp_path}"])
    adds, reads = Adds(), Reads()
    run_id, result = run_tracked(cfg, callbacks=[adds, reads, StopAt(2)])
    assert adds.seen == [True, True] and result.stopped == "enough at 2"
    history = [h["mine/double_loss"] for h in result.history]
    assert history == reads.values == [2 * h["train/loss"] for h in result.history]
    client = MlflowClient(tracking.tracking_uri)
    run = client.get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags["fedcore.stopped"] == "enough at 2"
    logged = client.get_metric_history(run_id, "mine/double_loss")
    assert [(m.step, m.value) for m in logged] == [(1, history[0]), (2, history[1])]
    again, result = run_tracked(cfg, callbacks=[Adds()])  # the stopped run resumes
    run = client.get_run(run_id)
    assert again == run_id and run.info.status == "FINISHED"
    assert "fedcore.stopped" not in run.data.tags
    assert [m.step for m in client.get_metric_history(run_id, "mine/double_loss")] == [1, 2, 3]


def test_built_in_callbacks_can_be_turned_off_or_replaced():
    cfg = load_config(None, [*FAST, "rounds=2"])
    silent = Simulation(cfg, builtins={"evaluation": None}).run()
    assert silent.client_tables == [] and silent.summary == {}
    assert not any("test/accuracy" in h for h in silent.history)

    class Cheap(Callback):
        def on_round_end(self, record):
            return RoundVerdict(metrics={"test/accuracy": 0.5, "test/loss": 1.0})

    mine = Simulation(cfg, builtins={"evaluation": Cheap()}).run()
    assert [h["test/accuracy"] for h in mine.history] == [0.5, 0.5]
    with pytest.raises(ValueError, match="unknown built-in callback 'eval'; allowed: evaluation"):
        Simulation(cfg, builtins={"eval": None})


def test_a_verdict_of_the_wrong_type_is_refused():
    class Wrong(Callback):
        def on_round_end(self, record):
            return {"stop": True}

    with pytest.raises(TypeError, match="Wrong.on_round_end returned dict, not a RoundVerdict"):
        Simulation(load_config(None, [*FAST, "rounds=1"]), [Wrong()]).run()


def test_personal_evaluation_is_contributed_by_the_personalised_objective():
    assert clients.build({"algorithm": "fedavg"}).callbacks() == []
    (own,) = clients.build({"algorithm": "ditto"}).callbacks()
    assert isinstance(own, PersonalEvaluation)


def test_a_user_callback_may_not_return_a_built_in_metric_name():
    """A callback returning ``test/accuracy`` replaced the built-in value in the history and in
    MLflow without a note; it is refused in one line naming the metric (issue 39)."""
    cfg = load_config(None, [*FAST, "rounds=1"])

    class Fake(Callback):
        def on_round_end(self, record):
            return RoundVerdict(metrics={"mine/x": 1.0, "test/accuracy": 0.999})

    with pytest.raises(ValueError) as e:
        Simulation(cfg, [Fake()]).run()
    assert str(e.value) == ("Fake.on_round_end returned metric 'test/accuracy', a built-in "
                            "metric's name (reserved); give it its own, e.g. 'mine/accuracy'")

    class Own(Callback):
        def on_round_end(self, record):
            return RoundVerdict(metrics={"mine/accuracy": 0.999})

    assert Simulation(cfg, [Own()]).run().history[0]["mine/accuracy"] == 0.999


class Forger(ConfiguredCallback):
    """A callback a config names by import path (``module:Class``), returning fedcore's own
    accuracy metric."""

    name = "forger"

    def on_round_end(self, record):
        return RoundVerdict(metrics={"test/accuracy": 0.999})


class Slotted(Callback):
    __slots__ = ()  # no weak reference: it slipped past the reserved names

    def on_round_end(self, record):
        return RoundVerdict(metrics={"test/loss": 0.0})


def test_reserved_names_hold_for_every_callback_however_it_is_named():
    """A callback named in the config overwrote ``test/accuracy`` (final/accuracy 0.999): the
    reserved names held only for callbacks passed from Python, and not for those whose
    instances take no weak reference."""
    cfg = load_config(None, [*FAST, "rounds=1",
                             "callbacks=[{callback: 'tests.test_callbacks:Forger'}]"])
    with pytest.raises(ValueError, match="^Forger.on_round_end returned metric 'test/accuracy', "
                       "a built-in metric's name"):
        Simulation(cfg).run()
    plain = load_config(None, [*FAST, "rounds=1"])
    with pytest.raises(ValueError, match="^Slotted.on_round_end returned metric 'test/loss'"):
        Simulation(plain, [Slotted()]).run()
    # a replacement of a built-in callback fills its slot: it may return built-in names
    own = Slotted()
    assert Simulation(plain, builtins={"divergence": own}).run().history[0]["test/loss"] == 0.0
