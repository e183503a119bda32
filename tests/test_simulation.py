"""The round loop: learning, metrics, determinism, NaN handling."""

import math

import numpy as np
import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.records import ClientUpdate, StageContext
from fedcore.core.round.probes import evaluate
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages import Chain, Stage

from .conftest import TINY

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)

ROUND_METRICS = {
    "train/loss", "agg/conflict_fraction", "agg/seconds", "agg/rejected_clients",
    "comm/bytes_up", "comm/bytes_up_total", "test/accuracy", "test/loss",
    "clients/accuracy_mean", "clients/accuracy_std", "clients/accuracy_worst10",
    "clients/accuracy_best10", "clients/jain_index",
}


def test_fedavg_on_digits_learns():
    cfg = load_config(None, ["rounds=10", "dataset.alpha=1.0"])
    result = Simulation(cfg).run()
    assert result.summary["final/accuracy"] > 0.6  # chance is 0.1
    assert result.history[-1]["train/loss"] < result.history[0]["train/loss"]


def test_round_metrics_and_summary():
    cfg = load_config(None, [*TINY, "eval_every=2", "target_accuracy=0.05"])
    sim = Simulation(cfg)
    result = sim.run()
    assert [h["round"] for h in result.history] == [1, 2, 3]
    assert ROUND_METRICS <= set(result.history[1]) and ROUND_METRICS <= set(result.history[2])
    assert "test/accuracy" not in result.history[0]
    d = sim.layout.dim
    assert result.history[0]["comm/bytes_up"] == 3 * (4 * d + 4)  # fp32 delta + int32 n_k
    assert result.history[2]["comm/bytes_up_total"] == 3 * 3 * (4 * d + 4)
    s = result.summary
    assert s["final/accuracy"] == result.history[-1]["test/accuracy"]
    accs = [h["test/accuracy"] for h in result.history if "test/accuracy" in h]
    assert math.isclose(s["auc/accuracy"], float(np.mean(accs)))
    assert s["rounds_to_target"] == 2.0
    table = result.client_tables[-1]
    assert len(table.client_id) == 6 and table.sampled.sum() == 3


def test_per_client_metrics_match_a_direct_evaluation():
    sim = Simulation(load_config(None, TINY))
    sim.run()
    table = evaluate(sim, sim.round, np.array([0]))[1]
    sim.model.eval()
    for c in sim.data.clients:
        with torch.no_grad():
            acc = (sim.model(c.x_test).argmax(1) == c.y_test).float().mean().item()
        assert math.isclose(table.accuracy[c.client_id], acc, rel_tol=1e-6)


def test_same_seed_is_bit_identical_whatever_the_training_order():
    cfg = load_config(None, [*TINY, "engine.backend=sequential"])  # the order-sensitive engine
    a = Simulation(cfg).run()
    b = Simulation(cfg).run(order_fn=lambda ids: list(reversed(ids)))
    strip = [{k: v for k, v in h.items() if k != "agg/seconds"} for h in a.history]
    assert strip == [{k: v for k, v in h.items() if k != "agg/seconds"} for h in b.history]
    c = Simulation(load_config(None, [*TINY, "seed=1"])).run()
    assert c.history[-1]["test/accuracy"] != a.history[-1]["test/accuracy"] or (
        c.history[-1]["train/loss"] != a.history[-1]["train/loss"])


class _Poison(Stage):
    """A client-side stage: even clients report a non-finite ``stat`` (or, with ``stat=None``,
    a NaN delta)."""

    name = "poison"
    side = "client"

    def __init__(self, stat: str | None = None, value: float = float("nan")) -> None:
        super().__init__()
        self.stat, self.value = stat, value

    def on_update(self, update: ClientUpdate, rc: StageContext) -> None:
        if update.client_id % 2 == 0:
            if self.stat is None:
                update.delta[0] = float("nan")
            else:
                update.stats[self.stat] = self.value


def poisoned(sim: Simulation, stage: _Poison) -> Simulation:
    sim.chain = Chain([*sim.chain.stages, stage])
    return sim


def test_nan_updates_are_excluded_and_counted():
    sim = poisoned(Simulation(load_config(None, TINY)), _Poison())
    result = sim.run()
    assert torch.isfinite(sim.params).all()
    rejected = [h["agg/rejected_clients"] for h in result.history]
    expected = [float(sum(c % 2 == 0 for c in sim.sample_clients(r))) for r in (1, 2, 3)]
    assert rejected == expected and sum(rejected) > 0



@pytest.mark.parametrize(
    ("method", "stat", "value"),
    [
        ("qfedavg", "loss_before", float("inf")),
        ("fedlf", "loss_before", float("nan")),
        ("fedfv", "loss_before", float("nan")),
        ("fedoui", "oui", float("nan")),
        ("fednova", "accumulation_norm", float("inf")),
    ],
)
def test_a_non_finite_client_scalar_rejects_the_client_like_a_nan_delta(method, stat, value):
    def run(poison):
        sim = Simulation(load_config(None, [*TINY, f"method={method}", "local.steps=2"]))
        return sim, poisoned(sim, poison).run()

    sim, result = run(_Poison(stat, value))
    ref_sim, ref = run(_Poison(None))
    assert torch.isfinite(sim.params).all()
    rejected = [h["agg/rejected_clients"] for h in result.history]
    expected = [float(sum(c % 2 == 0 for c in sim.sample_clients(r))) for r in (1, 2, 3)]
    assert rejected == expected and sum(rejected) > 0
    assert torch.equal(sim.params, ref_sim.params)
