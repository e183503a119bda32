"""Clients held out of training (dataset.holdout_clients): never sampled, the same for every
method at a seed, evaluated as unseen/*, and holdout 0 changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.round.simulation import Simulation
from fedcore.core.samplers import Population
from fedcore.core.samplers.uniform import Uniform

SMALL = ["model.name=mlp", "device=cpu", "rounds=2", "local.epochs=1", "local.steps=2",
         "dataset.num_clients=20", "clients_per_round=5"]


def _sim(*overrides: str) -> Simulation:
    return Simulation(load_config(None, [*SMALL, *overrides]))


@pytest.mark.parametrize("sampler", ["uniform", "power_of_choice"])
def test_a_held_out_client_is_never_sampled(sampler):
    for seed in range(4):
        sim = _sim(f"seed={seed}", "dataset.holdout_clients=0.25", f"method.sampler={sampler}")
        held = set(map(int, sim.held_out))
        assert len(held) == 5
        drawn: set[int] = set()
        for r in range(1, 61):
            ids = set(map(int, sim.sample_clients(r)))
            assert len(ids) == 5 and not ids & held, (seed, r)
            drawn |= ids
        # the sampler still reaches the training clients (uniform: all 15 of them)
        assert drawn <= set(range(20)) - held
        assert len(drawn) == 15 if sampler == "uniform" else len(drawn) >= 5


def test_every_method_holds_out_the_same_clients_at_a_seed():
    for seed in (0, 3):
        sets = [tuple(_sim(f"seed={seed}", "dataset.holdout_clients=0.2", f"method={m}").held_out)
                for m in ("fedavg", "ditto", "scaffold", "craft")]
        assert len(set(sets)) == 1 and len(sets[0]) == 4
    other = _sim("seed=1", "dataset.holdout_clients=0.2").held_out
    assert tuple(other) != tuple(_sim("seed=0", "dataset.holdout_clients=0.2").held_out)


def test_holdout_zero_leaves_the_config_hash_and_the_draws_as_they_were():
    cfg = load_config(None, SMALL)
    assert "holdout_clients" not in cfg.resolved()["dataset"]
    assert load_config(None, [*SMALL, "dataset.holdout_clients=0"]).config_hash() == \
        cfg.config_hash()
    sim = Simulation(cfg)
    assert len(sim.held_out) == 0
    sizes = np.array([c.num_train for c in sim.data.clients])
    for r in (1, 2, 7):
        pop = Population(cfg.seed, r, 20, 5, sizes, sim.local_loss)
        assert np.array_equal(sim.sample_clients(r), np.sort(Uniform().sample(pop)))


def test_the_evaluation_splits_training_and_unseen_clients():
    sim = _sim("dataset.holdout_clients=0.25", "method=ditto")
    result = sim.run()
    last, table = result.history[-1], result.client_tables[-1]
    held = table.extra["held_out"]
    assert np.array_equal(np.flatnonzero(held), sim.held_out)
    assert last["clients/accuracy_mean"] == pytest.approx(table.accuracy[~held].mean())
    assert last["unseen/accuracy"] == pytest.approx(table.accuracy[held].mean())
    assert last["unseen/accuracy_worst10"] == pytest.approx(np.sort(table.accuracy[held])[0])
    assert last["unseen/participation_gap"] == pytest.approx(
        last["clients/accuracy_mean"] - last["unseen/accuracy"])
    assert result.summary["final/participation_gap"] == last["unseen/participation_gap"]
    # Ditto: an unseen client has no personal model and is served the global one
    personal = table.extra["personal_accuracy"]
    assert np.allclose(personal[held], table.accuracy[held])
    assert last["personal/accuracy_mean"] == pytest.approx(personal[~held].mean())


def test_no_unseen_metrics_without_a_holdout():
    result = _sim().run()
    assert not any(k.startswith("unseen/") for k in result.history[-1])
    assert "held_out" not in result.client_tables[-1].extra
    assert "final/participation_gap" not in result.summary


@pytest.mark.parametrize("value,needle", [
    ("0.01", "holds out 0 of dataset.num_clients=20"),
    ("0.9", "holds out 18 of dataset.num_clients=20"),
    ("1", "dataset.holdout_clients"),
])
def test_a_holdout_that_leaves_too_few_clients_is_one_line(value, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, [*SMALL, f"dataset.holdout_clients={value}"])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_power_of_choice_candidates_are_checked_against_the_training_clients():
    with pytest.raises(ConfigError, match="allowed: 5..15"):
        load_config(None, [*SMALL, "dataset.holdout_clients=0.25",
                           "method.sampler={sampler: power_of_choice, d: 18}"])


def test_unseen_metrics_reach_mlflow(tracking):
    from fedcore.tracking import load_settings, mlflow_client
    from fedcore.tracking.runner import run_tracked

    run_id, result = run_tracked(load_config(None, [*SMALL, "dataset.holdout_clients=0.2"]))
    client = mlflow_client(load_settings())
    metrics = client.get_run(run_id).data.metrics
    for name in ("unseen/accuracy", "unseen/accuracy_worst10", "unseen/participation_gap",
                 "final/unseen_accuracy", "final/participation_gap"):
        assert name in metrics, name
    steps = client.get_metric_history(run_id, "unseen/participation_gap")
    assert [m.step for m in steps] == [1, 2]
    assert metrics["final/participation_gap"] == pytest.approx(
        result.summary["final/participation_gap"])


def test_own_data_keeps_the_runs_holdout_drawn_from_its_partition_seed():
    import torch
    from torch import nn

    from fedcore.core.data.own import federate

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(240, 8, generator=g), torch.randint(0, 3, (240,), generator=g)
    cfg = load_config(None, ["rounds=1", "dataset.num_clients=10", "clients_per_round=2",
                             "local.epochs=1", "device=cpu", "dataset.holdout_clients=0.25"])
    held = []
    for seed in (5, 5, 6):
        data = federate(x, y, name="blobs", num_clients=10, alpha=0.5, seed=seed)
        sim = Simulation(cfg, data=data, model=nn.Sequential(nn.Linear(8, 3)))
        assert sim.cfg.dataset.holdout_clients == 0.25 and sim.cfg.dataset.partition_seed == seed
        held.append(tuple(sim.held_out))
    assert len(held[0]) == 3 and held[0] == held[1]  # 2.5 clients round half up to 3
