"""Byzantine attacks act on every vector a client sends, for every shipped method config.

The guarantee tested (docs/explanation/reliability.md): one round, 10 clients, all sampled, one of
them Byzantine with a sign flip of strength 1e6. A non-robust rule gives a different global model
than the clean run. A robust rule (Krum, Multi-Krum, median, trimmed mean, RFA, geometric median)
moves the global model by at most ``2 R`` from the clean run, R = the L2 norm of the
coordinate-wise largest |honest delta|: the radius of the box that holds every honest delta, and so
every step that stays in the honest hull, whatever the attack strength (the attacker alone would
move it by about 1e6 R).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.data.federated import build_federated_data
from fedcore.core.round.probes import run_round, train_client
from fedcore.core.round.simulation import Simulation

METHODS = sorted(p.stem for p in Path("configs/methods").glob("*.yaml"))
ROBUST = {"krum", "multikrum", "median", "trimmed_mean", "rfa", "geometric_median"}
BASE = ["rounds=1", "model.name=mlp", "dataset.num_clients=10", "clients_per_round=10",
        "local.steps=1", "local.batch_size=8"]
ATTACK = ["clients.byzantine_fraction=0.1", "clients.attack=sign_flip",
          "clients.attack_strength=1e6"]


@pytest.fixture(scope="module")
def data():
    """The one federated split every run here shares (the attack is not part of it)."""
    cfg = load_config(None, BASE)
    return build_federated_data(cfg.dataset, cfg.seed, torch.device("cpu"), cfg.clients)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread is several times faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_every_shipped_method_is_covered():
    assert len(METHODS) >= 30 and {"scafcom_topk", "scaffold", "fedavg"} <= set(METHODS)
    assert ROBUST <= set(METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_attack_changes_the_model_or_is_bounded_by_the_robust_rule(method, data):
    clean = Simulation(load_config(None, [*BASE, f"method={method}"]), data=data)
    attacked = Simulation(load_config(None, [*BASE, *ATTACK, f"method={method}"]), data=data)
    assert len(attacked.byzantine) == 1
    start = clean.params.clone()
    if method in ROBUST:  # the honest deltas of the round (stateless fedavg clients)
        honest = torch.stack([train_client(clean, k, 1).delta for k in range(10)])
    # FedBuff applies the first buffer_size arrivals of the clients in flight: the attacker's
    # update may reach the model only at a later step
    for r in range(1, (3 if method == "fedbuff" else 1) + 1):
        run_round(clean, r)
        run_round(attacked, r)
    moved = float((attacked.params - clean.params).norm())
    if method in ROBUST:
        radius = float(honest.abs().amax(dim=0).norm())
        assert moved <= 2 * radius, f"{method}: the attacker moved the model by {moved:.3g}"
    else:
        assert moved > 0, f"{method}: the attacked model equals the clean one"
    assert torch.isfinite(attacked.params).all() and not torch.equal(start, attacked.params)


def test_scafcom_increment_is_attacked_and_committed_as_sent(data):
    """SCAFCOM sends only its control-variate increment: the attack must change it, and the
    Byzantine client's c_i moves by exactly what the server added (times N)."""
    over = [*BASE, "method=scafcom_topk", "method.compression.k_frac=1.0"]
    clean = Simulation(load_config(None, over), data=data)
    attacked = Simulation(load_config(None, [*over, *ATTACK]), data=data)
    (bad,) = attacked.byzantine
    run_round(clean, 1)
    run_round(attacked, 1)
    c_clean, c_bad = clean.store[bad]["scaffold_c"], attacked.store[bad]["scaffold_c"]
    assert torch.allclose(c_bad, -1e6 * c_clean, rtol=1e-5)
    assert control_gap(attacked) <= 1e-6


@pytest.mark.parametrize("uplink", ["both", "reconstruct"])
def test_scaffold_keeps_c_the_mean_of_the_client_controls_under_attack(uplink, data):
    """Server and clients commit the same Delta c_i: with ``reconstruct`` the server rebuilds it
    from the (attacked) delta, and the Byzantine client commits that same reconstruction."""
    over = [*BASE, "method=scaffold", f"method.client.uplink={uplink}", "local.steps=2",
            "clients.byzantine_fraction=0.2", "clients.attack=sign_flip",
            "clients.attack_strength=1", "clients_per_round=5"]
    sim = Simulation(load_config(None, over), data=data)
    for r in (1, 2, 3):
        run_round(sim, r)
    assert control_gap(sim) <= 1e-6


def control_gap(sim: Simulation) -> float:
    """||c - mean_i c_i||_inf relative to the largest |c_i| (0 when c is their mean)."""
    controls = torch.stack([sim.store[k].get("scaffold_c", torch.zeros_like(sim.params))
                            for k in range(sim.data.num_clients)])
    gap = float((sim.aggregator.c - controls.mean(dim=0)).abs().max())
    return gap / max(float(controls.abs().max()), 1.0)
