"""Misbehaving clients: label noise and Byzantine updates, and robust rules against them."""

import numpy as np
import pytest
import torch

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.compose.configure import load_config
from fedcore.core.data.adversaries import attack_update, choose_clients, flip_labels
from fedcore.core.round.probes import train_client
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages.attack import attack
from fedcore.tracking.run_tags import run_tags

from .conftest import TINY


def test_flip_labels_changes_exactly_the_rate_to_other_classes():
    y = torch.arange(100) % 10
    flipped = flip_labels(y, 0.4, 10, numpy_rng(0, "t"))
    changed = flipped != y
    assert int(changed.sum()) == 40
    assert ((flipped >= 0) & (flipped < 10)).all()


def test_choose_clients_is_seeded_floor_fraction():
    a = choose_clients(20, 0.2, 0, "noisy")
    assert len(a) == 4 and np.array_equal(a, choose_clients(20, 0.2, 0, "noisy"))
    assert len(choose_clients(20, 0.0, 0, "noisy")) == 0


def test_attacks():
    d = torch.tensor([1.0, -2.0, 3.0])
    g = torch.Generator().manual_seed(0)
    assert torch.equal(attack_update(d, "sign_flip", 3.0, g), -3.0 * d)
    assert torch.equal(attack_update(d, "scale", 10.0, g), 10.0 * d)
    noise = attack_update(torch.zeros(10_000), "gaussian", 2.0, g)
    assert abs(noise.std().item() - 2.0) < 0.1


def test_noisy_clients_train_on_flipped_labels_and_keep_clean_tests():
    clean = Simulation(load_config(None, TINY)).data
    noisy = Simulation(load_config(None, [*TINY, "clients.noisy_fraction=0.5",
                                          "clients.noise_rate=0.5"])).data
    assert len(noisy.noisy_clients) == 3
    for k in range(6):
        changed = (clean.clients[k].y_train != noisy.clients[k].y_train).float().mean().item()
        assert (changed > 0.3) == (k in noisy.noisy_clients)
        assert torch.equal(clean.clients[k].y_test, noisy.clients[k].y_test)


@pytest.mark.slow
def test_byzantine_client_sends_the_attacked_delta():
    honest = Simulation(load_config(None, TINY))
    attacked = Simulation(load_config(None, [*TINY, "clients.byzantine_fraction=0.5",
                                             "clients.attack=sign_flip",
                                             "clients.attack_strength=3"]))
    rc = attacked.round_context(1)
    for k in range(6):
        a, up = train_client(honest, k, 1).delta, train_client(attacked, k, 1)
        if k in attacked.byzantine:
            attack(rc, up)
        b = up.delta
        expected = -3.0 * a if k in attacked.byzantine else a
        torch.testing.assert_close(b, expected)


def test_misbehaviour_is_recorded_as_tags():
    cfg = load_config(None, [*TINY, "clients.byzantine_fraction=0.2", "clients.attack=scale"])
    tags = run_tags(cfg.resolved(), cfg.config_hash())
    assert tags["clients.byzantine_fraction"] == "0.2" and tags["clients.attack"] == "scale"
    assert "clients.noisy_fraction" not in tags


@pytest.mark.slow
def test_median_resists_scaled_attackers_where_fedavg_breaks():
    common = ["rounds=4", "model.name=mlp", "dataset.alpha=1.0", "clients_per_round=10",
              "clients.byzantine_fraction=0.2", "clients.attack=scale",
              "clients.attack_strength=50"]
    robust = Simulation(load_config(None, [*common, "method=median"])).run()
    plain = Simulation(load_config(None, [*common, "method=fedavg"])).run()
    assert robust.summary["final/accuracy"] > plain.summary["final/accuracy"] + 0.2
