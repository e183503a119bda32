"""Ditto (METHODS.md §7.5): persistent personal models, proximal pull to theta_t, metrics."""

import math

import pytest
import torch

from fedcore import clients
from fedcore.config import load_config
from fedcore.simulation import Simulation

from .conftest import TINY

SMALL = [*TINY, "dataset.num_clients=6", "clients_per_round=2", "local.epochs=1"]


def _sim(*extra):
    return Simulation(load_config(None, ["method=ditto", *SMALL, *extra]))


@pytest.mark.slow
def test_personal_models_persist_for_clients_not_sampled():
    sim = _sim()
    first = set(map(int, sim.sample_clients(1)))
    second = set(map(int, sim.sample_clients(2)))
    resting = sorted(first - second)
    assert resting, "seed should give a client sampled in round 1 only"
    sim.run_round(1)
    kept = {k: sim.store[k]["ditto_personal"].clone() for k in first}
    for k in set(range(6)) - first:
        assert "ditto_personal" not in sim.store[k]
    sim.run_round(2)
    for k in resting:
        assert torch.equal(sim.store[k]["ditto_personal"], kept[k])
        assert not torch.equal(kept[k], sim.params)
    for k in second & first:
        assert not torch.equal(sim.store[k]["ditto_personal"], kept[k])


@pytest.mark.slow
def test_huge_lambda_keeps_the_personal_model_at_the_global_model():
    sim = _sim("method.client.lam=1e9")
    theta = sim.params.clone()
    sim.run_round(1)
    for k in map(int, sim.sample_clients(1)):
        torch.testing.assert_close(sim.store[k]["ditto_personal"], theta, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_global_model_trains_exactly_as_the_inner_objective():
    # Ditto trains sequentially; the FedAvg reference must too for bit equality
    fedavg = Simulation(load_config(None, ["method=fedavg", *SMALL, "engine=sequential"]))
    ditto = _sim()
    for r in (1, 2):
        ditto.run_round(r)
        fedavg.run_round(r)
    assert torch.equal(ditto.params, fedavg.params)


@pytest.mark.slow
def test_personal_metrics_and_unsampled_clients_use_the_global_model():
    sim = _sim("method.client.personal_steps=3")
    sim.run_round(1)
    metrics, table = sim.evaluate(1, sim.sample_clients(1))
    for key in ("mean", "std", "worst10", "best10"):
        assert f"personal/accuracy_{key}" in metrics
    personal = table.extra["personal_accuracy"]
    unsampled = ~table.sampled
    assert unsampled.any()
    assert personal[unsampled] == pytest.approx(table.accuracy[unsampled])
    assert not math.isnan(metrics["personal/accuracy_mean"])


def test_inner_objective_is_validated():
    assert (
        clients.build({"algorithm": "ditto", "inner": {"algorithm": "fedprox"}}).inner.hp.mu == 0.01
    )
    for inner in (
        {"algorithm": "nope"},
        {"algorithm": "fedprox", "bad": 1},
        {"algorithm": "ditto"},
    ):
        with pytest.raises(ValueError):
            clients.build({"algorithm": "ditto", "inner": inner})
