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
    sizes = np.array([len(c.y_test) for c in sim.data.clients], dtype=float)
    pooled = np.dot(table.accuracy[held], sizes[held]) / sizes[held].sum()  # by test size
    assert last["unseen/accuracy"] == pytest.approx(pooled)
    assert last["unseen/clients"] == held.sum() and last["unseen/samples"] == sizes[held].sum()
    assert last["unseen/accuracy_worst10"] == pytest.approx(np.sort(table.accuracy[held])[0])
    trained = np.dot(table.accuracy[~held], sizes[~held]) / sizes[~held].sum()
    assert last["unseen/participation_gap"] == pytest.approx(trained - pooled)
    assert result.summary["final/participation_gap"] == last["unseen/participation_gap"]
    # Ditto: an unseen client has no personal model and is served the global one
    personal = table.extra["personal_accuracy"]
    assert np.allclose(personal[held], table.accuracy[held])
    assert last["personal/accuracy_mean"] == pytest.approx(personal[~held].mean())


def test_unseen_accuracy_weights_clients_by_test_size():
    from fedcore.core.callbacks.evaluation import unseen_metrics

    out = unseen_metrics(np.array([1.0, 0.0]), np.array([2.0, 98.0]), 0.5)
    assert out["unseen/accuracy"] == pytest.approx(0.02)  # not the unweighted 0.5
    assert out["unseen/clients"] == 2 and out["unseen/samples"] == 100
    assert out["unseen/participation_gap"] == pytest.approx(0.48)


@pytest.mark.parametrize("seed", range(10))
def test_every_class_keeps_training_samples_at_dirichlet_0_1(seed):
    from fedcore.core.data.holdout import classes_missing, data_class_counts

    sim = _sim(f"seed={seed}", "dataset.name=digits", "dataset.alpha=0.1",
               "dataset.holdout_clients=0.2")
    counts = data_class_counts(sim.data)
    assert len(sim.held_out) == 4
    assert classes_missing(counts, sim.held_out) == 0
    # stratified: no class loses most of its training samples to the held-out clients
    share = counts[sim.held_out].sum(axis=0) / counts.sum(axis=0)
    assert share.max() < 0.5, share


def test_a_class_only_held_out_clients_have_is_counted():
    from fedcore.core.data.holdout import classes_missing

    counts = np.array([[5, 0, 0], [0, 3, 0], [0, 0, 2], [1, 1, 0]])
    assert classes_missing(counts, np.array([2])) == 1
    assert classes_missing(counts, np.array([0, 1])) == 0
    assert classes_missing(counts, np.array([0, 1, 3])) == 2


def test_the_cover_keeps_a_class_random_draws_would_take_out():
    from fedcore.core.data.holdout import classes_missing, held_out_clients

    # classes 1-4 live on clients 3, 7, 11, 15 only: one random draw of 15 of 20 clients in
    # 15504 keeps them and a client of class 0
    counts = np.zeros((20, 5), dtype=np.int64)
    counts[:, 0] = 4
    for c, k in enumerate((3, 7, 11, 15), start=1):
        counts[k] = [0] * 5
        counts[k, c] = 5
    cfg = load_config(None, ["dataset.num_clients=20", "clients_per_round=1",
                             "dataset.holdout_clients=0.75"]).dataset
    for seed in range(5):
        held = held_out_clients(cfg, seed, counts)
        assert len(held) == 15 and classes_missing(counts, held) == 0, seed


def test_a_partition_that_cannot_keep_every_class_is_refused_in_one_line(capsys, tracking):
    from fedcore.cli import main

    code = main(["run", *SMALL, "dataset.name=digits", "dataset.alpha=0.01",
                 "clients_per_round=2", "dataset.holdout_clients=0.9", "seed=0"])
    err = [line for line in capsys.readouterr().err.splitlines() if " mlflow." not in line]
    assert code == 2
    assert len(err) == 1 and "dataset.holdout_clients=0.9" in err[0] and "allowed" in err[0]


def test_a_sweep_with_such_a_partition_is_refused_before_any_run(capsys, tracking, tmp_path):
    import yaml
    from mlflow.tracking import MlflowClient

    from fedcore.cli import main

    path = tmp_path / "holdout.yaml"
    path.write_text(yaml.safe_dump({
        "name": "holdout", "grid": {"dataset.alpha": [0.5, 0.01]}, "seeds": [0, 1],
        "set": {"model.name": "mlp", "rounds": 1, "dataset.num_clients": 20,
                "clients_per_round": 2, "dataset.holdout_clients": 0.9}}))
    assert main(["sweep", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " mlflow." not in line]
    assert len(err) == 1 and err[0].startswith("fedcore: error: dataset.holdout_clients=0.9")
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment)
    assert exp is None or client.search_runs([exp.experiment_id]) == []


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
                 "final/unseen_accuracy", "final/participation_gap", "final/unseen_clients",
                 "final/unseen_samples"):
        assert name in metrics, name
    assert metrics["data/classes_missing_from_training"] == 0
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
