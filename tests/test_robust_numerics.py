"""Robust rules stay finite and correct at the extremes of float32: attackers scaling by 1e30
(finite) and near-identical honest updates."""

from __future__ import annotations

import pytest
import torch

from fedcore.core import aggregators
from fedcore.core.aggregators.crf import CRF, crf_inference
from fedcore.core.aggregators.krum import krum_scores
from fedcore.core.compose.configure import load_config
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation


def two_of_seven(strength: float = 1e30) -> tuple[torch.Tensor, torch.Tensor]:
    """7 float32 deltas: 5 honest around mu, the last 2 honest ones scaled by ``strength``."""
    g = torch.Generator().manual_seed(3)
    d = 200
    mu = 0.01 * torch.randn(d, generator=g)
    honest = mu + 0.002 * torch.randn(7, d, generator=g)
    deltas = honest.clone()
    deltas[5:] *= strength
    return deltas, honest[:5]


def batch(deltas: torch.Tensor) -> UpdateBatch:
    return UpdateBatch(deltas=deltas, num_samples=torch.full((deltas.shape[0],), 10))


@pytest.mark.parametrize("rule", ["rfa", "geometric_median"])
def test_weiszfeld_survives_attackers_at_1e30_and_bounds_them(rule):
    deltas, honest = two_of_seven()
    step = aggregators.build({"rule": rule}).aggregate(batch(deltas)).step
    assert step.dtype == torch.float32 and torch.isfinite(step).all()
    # bounded: within the honest spread of the honest mean (the attackers alone: 1e28 away)
    spread = float((honest - honest.mean(0)).norm(dim=1).max())
    assert float((step - honest.mean(0)).norm()) <= spread


def test_crf_survives_attackers_at_1e30_with_its_weight_floor():
    deltas, _ = two_of_seven()
    res = crf_inference(deltas, torch.full((7,), 10), CRF.HParams())
    assert torch.isfinite(res.weights).all() and not res.fallback
    assert float(res.score[5:].max()) < 0.05 < 0.5 < float(res.score[:5].min())  # flagged...
    # ... and get CRF's floor E[y] ~ 0.087 (label 0.25 at 0.625 nats): weight ~1/10 of honest
    assert float(res.weights[5:].max()) < 0.15 * float(res.weights[:5].min())
    step = CRF().aggregate(batch(deltas)).step
    assert step.dtype == torch.float32 and torch.isfinite(step).all()


@pytest.mark.parametrize("method", ["rfa", "crf_fedavg"])
def test_probe_two_of_seven_scaling_by_1e30_aggregates_a_finite_step(method):
    """The probe's run: it failed at round 1 with 'the <rule> step is not finite'."""
    sim = Simulation(load_config(None, [
        f"method={method}", "rounds=1", "model.name=mlp", "dataset.num_clients=7",
        "clients_per_round=7", "clients.byzantine_fraction=0.3", "clients.attack=scale",
        "clients.attack_strength=1e30", "local.steps=1"]))
    assert len(sim.byzantine) == 2
    start = sim.params.clone()
    run_round(sim, 1)
    assert torch.isfinite(sim.params).all()
    if method == "rfa":  # bounded: the attackers' 1e30 does not reach the model
        assert float((sim.params - start).abs().max()) < 1.0


def test_krum_in_float32_picks_an_honest_update_among_near_identical_ones():
    """m = 30: 29 honest updates 1e-4 apart around a common vector of norm ~450, one outlier
    3x farther. cdist's matmul form in float32 picked the outlier in 6 of these 20 cases."""
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        base = 10 * torch.randn(2000, generator=g)
        honest = base + 1e-4 * torch.randn(29, 2000, generator=g)
        outlier = base + 3e-4 * torch.randn(1, 2000, generator=g)
        x = torch.cat([outlier, honest])
        assert x.dtype == torch.float32
        assert int(torch.argmin(krum_scores(x, 5))) != 0, f"seed {seed}: Krum chose the outlier"


def test_fedlf_with_attackers_at_1e30_gives_a_finite_step_not_an_empty_qp():
    """It raised 'gram must be a non-empty square matrix': every float32 row norm overflowed."""
    deltas, _ = two_of_seven()
    b = batch(deltas)
    b.stats["loss_before"] = torch.linspace(1.0, 2.0, 7)
    step = aggregators.build({"rule": "fedlf"}).aggregate(b).step
    assert step.dtype == torch.float32 and torch.isfinite(step).all()
