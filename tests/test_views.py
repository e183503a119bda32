"""Components and callbacks see narrow views: callbacks a read-only RunView (never the
simulation), evaluation is a function of (model, params, data), stages a StageContext."""

from __future__ import annotations

import pytest
import torch

from fedcore.core.callbacks import Callback
from fedcore.core.compose.configure import load_config
from fedcore.core.records import StageContext
from fedcore.core.records.run import RunView
from fedcore.core.round.simulation import Simulation

from .conftest import TINY


class _Seen(Callback):
    def __init__(self):
        self.start = None
        self.rounds = []

    def on_run_start(self, run):
        self.start = run

    def on_round_end(self, record):
        self.rounds.append(record.run)


def test_callbacks_get_a_read_only_run_view_not_the_simulation():
    seen = _Seen()
    sim = Simulation(load_config(None, [*TINY, "rounds=2", "local.epochs=1"]), [seen])
    sim.run()
    assert isinstance(seen.start, RunView) and not isinstance(seen.start, Simulation)
    assert all(r is seen.start for r in seen.rounds)
    view = seen.start
    assert view.round == 2 and view.history is sim.history and view.params is sim.params
    with pytest.raises(AttributeError):
        view.params = torch.zeros(1)  # no setter: the view cannot rebind the run's state
    assert not hasattr(view, "aggregator") and not hasattr(view, "save_checkpoint")


def test_evaluation_is_a_function_of_model_params_and_data():
    from fedcore.core.callbacks.evaluation import evaluate

    sim = Simulation(load_config(None, [*TINY, "rounds=1", "local.epochs=1"]))
    result = sim.run()
    out = evaluate(sim.model, sim.params, sim.data, sim.buffers)
    last = result.history[-1]
    assert out.metrics["test/accuracy"] == last["test/accuracy"]
    assert out.metrics["clients/accuracy_mean"] == last["clients/accuracy_mean"]
    assert out.accuracy.tolist() == result.client_tables[-1].accuracy.tolist()


def test_stages_see_a_stage_context():
    from fedcore.core.stages import Stage

    seen = []

    class Look(Stage):
        name = "look"

        def begin_round(self, rc, sampled):
            seen.append(rc)
            return {}

    sim = Simulation(load_config(None, [*TINY, "rounds=1", "local.epochs=1"]))
    sim.chain.stages.insert(0, Look())
    sim.play_round(1, sampled=[0, 1, 2])
    (rc,) = seen
    assert isinstance(rc, StageContext) and rc.round == 1
    assert rc.uplink == ("delta",) and rc.needs == frozenset(sim.aggregator.needs)


def test_the_driver_stays_small_and_hands_itself_to_no_component():
    """``simulation.py`` under 300 lines; the simulation passes ``self`` only to the read-only
    ``RunView`` and to its own state helpers (``fedcore.core.round.run_state``), never to a
    component."""
    import ast
    from pathlib import Path

    import fedcore.core.round.simulation

    source = Path(fedcore.core.round.simulation.__file__).read_text()
    assert len(source.splitlines()) < 300
    allowed = {"RunView", "run_state.state_of", "run_state.restore", "getattr"}  # its own field
    given = {ast.unparse(node.func) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call)
             and any(isinstance(a, ast.Name) and a.id == "self"
                     for a in [*node.args, *(k.value for k in node.keywords)])}
    assert given <= allowed, f"the simulation is handed to {sorted(given - allowed)}"
