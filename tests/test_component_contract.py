"""One component contract (issue 49 item 1): the driver asks every component, of all seven
kinds, for its callbacks and state through ``Component``; the config check is one loop over
one table of axes, so a new axis is one line in it (with its key in the schema)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import Field
from pydantic.fields import FieldInfo

from fedcore.core.aggregators.base import Aggregator
from fedcore.core.callbacks import Callback
from fedcore.core.clients.base import ClientAlgorithm
from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams, Registry
from fedcore.core.component.requirements import setting
from fedcore.core.compose import axes
from fedcore.core.compose.configure import component_specs, load_config
from fedcore.core.compression.base import Compressor
from fedcore.core.config import ConfigError, ExperimentConfig, MethodConfig
from fedcore.core.records.run import RoundRecord
from fedcore.core.round.simulation import Simulation
from fedcore.core.samplers import Population, Sampler
from fedcore.core.samplers.uniform import Uniform
from fedcore.core.stages import Stage

TINY = ["rounds=3", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3",
        "local.steps=1"]


class Counter(Callback):
    def __init__(self) -> None:
        self.rounds: list[int] = []

    def on_round_end(self, record: RoundRecord) -> None:
        self.rounds.append(record.round)


class Watched(Stage):
    """A client-side stage that contributes a callback to the run."""

    side = "client"

    def __init__(self, hparams: Any = None) -> None:
        super().__init__(hparams)
        self.counter = Counter()

    def callbacks(self) -> list[Callback]:
        return [self.counter]


def test_a_stage_contributes_a_callback_called_every_round() -> None:
    cfg = load_config(None, [*TINY, f"method.stages=[{{stage: '{__name__}:Watched'}}]"])
    sim = Simulation(cfg)
    stage = next(s for s in sim.chain.stages if isinstance(s, Watched))
    sim.run()
    assert stage.counter.rounds == [1, 2, 3]


class CountingSampler(Uniform):
    """Uniform draws that count themselves: a sampler with a state."""

    def __init__(self, hparams: Any = None) -> None:
        super().__init__(hparams)
        self.draws = 0

    def sample(self, pop: Population) -> np.ndarray:
        self.draws += 1
        return super().sample(pop)

    def state_dict(self) -> dict[str, Any]:
        return {"draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.draws = int(state.get("draws", 0))


def test_every_kind_is_asked_for_its_state() -> None:
    sampler = f"method.sampler={{sampler: '{__name__}:CountingSampler'}}"
    sim = Simulation(load_config(None, [*TINY, "rounds=2", sampler]))
    for kind in (ClientAlgorithm, Aggregator, Compressor, Sampler, Stage):
        assert any(isinstance(c, kind) for c in sim.components()), kind
    sim.run()
    state = sim.state_dict()
    assert state["components"]["sampler"] == {"draws": 2}
    again = Simulation(load_config(None, [*TINY, "rounds=2", sampler]))
    again.load_state_dict(state)
    assert isinstance(again.sampler, CountingSampler) and again.sampler.draws == 2
    # components without state leave a checkpoint as it was
    assert "components" not in Simulation(load_config(None, TINY)).state_dict()


# a new kind of component: a registry of its own, one entry, one requirement
PACERS: Registry[Component] = Registry("pacer", "pacer", __name__, f"{__name__}:Component")


class PaceHParams(HParams):
    every: int = Field(1, ge=1, le=10)


@PACERS.register("steady")
class Steady(Component):
    HParams = PaceHParams

    @classmethod
    def requirements(cls, hp: Any) -> list[Any]:
        return [setting("local.momentum", (0.0,), "pacer steady", "needs plain SGD")]


@pytest.fixture
def pacer_axis(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``method.pacer``: the schema's key and one line in the axis table."""
    monkeypatch.setitem(MethodConfig.model_fields, "pacer", FieldInfo(annotation=Any,
                                                                       default=None))
    MethodConfig.model_rebuild(force=True)
    ExperimentConfig.model_rebuild(force=True)
    monkeypatch.setattr(axes, "AXES", (*axes.AXES, axes.Axis(PACERS, "method.pacer")))
    yield
    monkeypatch.undo()
    MethodConfig.model_rebuild(force=True)
    ExperimentConfig.model_rebuild(force=True)


def test_a_new_axis_is_one_line_in_the_table(pacer_axis: Any) -> None:
    cfg = load_config(None, ["method.pacer={pacer: steady}", "local.momentum=0"])
    assert cfg.method.pacer == {"pacer": "steady", "every": 1}  # type: ignore[attr-defined]
    assert (PACERS, {"pacer": "steady", "every": 1}) in component_specs(cfg)
    with pytest.raises(ConfigError, match=r"^method.pacer.every: .*less than or equal to 10"):
        load_config(None, ["method.pacer={pacer: steady, every: 11}"])
    with pytest.raises(ConfigError, match=r"^method.pacer.pacer: unknown 'fast'; allowed: "
                       r"steady"):
        load_config(None, ["method.pacer={pacer: fast}"])
    with pytest.raises(ConfigError, match=r"^local.momentum: pacer steady needs plain SGD"):
        load_config(None, ["method.pacer={pacer: steady}", "local.momentum=0.9"])


def test_the_table_holds_all_seven_kinds() -> None:
    assert [a.registry.kind for a in axes.AXES] == [
        "client algorithm", "aggregator rule", "compressor", "error feedback", "sampler",
        "stage", "callback"]
