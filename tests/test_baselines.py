"""FedAvg, FedAvgM, FedProx against their definitions (docs/methods/ fedavg, fedavgm, fedprox)."""

import pytest
import torch

from fedcore.core import aggregators
from fedcore.core.clients.template import run_client
from fedcore.core.compose.configure import load_config
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.round.simulation import Simulation

from .conftest import TINY


def _batch(seed=0, m=4, d=7):
    g = torch.Generator().manual_seed(seed)
    return UpdateBatch(torch.randn(m, d, generator=g, dtype=torch.float64),
                       torch.tensor([10.0, 30.0, 20.0, 40.0][:m]))


def test_fedavg_is_the_sample_weighted_mean():
    batch = _batch()
    step = aggregators.build({"rule": "fedavg"}).aggregate(batch).step
    n = batch.num_samples
    expected = sum(n[k] * batch.deltas[k] for k in range(4)) / n.sum()
    torch.testing.assert_close(step, expected)


def test_fedavg_server_lr_scales_the_step():
    batch = _batch()
    base = aggregators.build({"rule": "fedavg"}).aggregate(batch).step
    torch.testing.assert_close(aggregators.build({"rule": "fedavg", "server_lr": 0.5})
                               .aggregate(batch).step, 0.5 * base)


def test_fedavgm_with_beta_zero_equals_fedavg_every_round():
    avg, avgm = aggregators.build({"rule": "fedavg"}), aggregators.build(
        {"rule": "fedavgm", "beta": 0.0})
    for r in range(3):
        batch = _batch(seed=r)
        torch.testing.assert_close(avgm.aggregate(batch).step, avg.aggregate(batch).step)


def test_fedavgm_accumulates_momentum():
    agg = aggregators.build({"rule": "fedavgm", "beta": 0.9, "server_lr": 1.0})
    b1, b2 = _batch(1), _batch(2)
    mean1 = b1.weights @ b1.deltas
    mean2 = b2.weights @ b2.deltas
    torch.testing.assert_close(agg.aggregate(b1).step, mean1)
    torch.testing.assert_close(agg.aggregate(b2).step, mean2 + 0.9 * mean1)
    state = agg.state_dict()
    fresh = aggregators.build({"rule": "fedavgm", "beta": 0.9})
    fresh.load_state_dict(state)
    b3 = _batch(3)
    torch.testing.assert_close(fresh.aggregate(b3).step, agg.aggregate(b3).step)


def test_unknown_rule_and_bad_hparam_are_rejected():
    with pytest.raises(KeyError, match="allowed: .*fedavg"):
        aggregators.build({"rule": "nope"})
    with pytest.raises(ValueError, match="beta"):
        aggregators.build({"rule": "fedavgm", "beta": 1.5})


def test_update_batch_from_plain_tensors_checks_shapes():
    with pytest.raises(ValueError, match="m x d"):
        UpdateBatch(torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="num_samples"):
        UpdateBatch(torch.zeros(3, 2), torch.ones(2))


def _final_params(overrides):
    sim = Simulation(load_config(None, [*TINY, *overrides]))
    sim.run()
    return sim.params


@pytest.mark.slow
def test_fedprox_with_mu_zero_equals_fedavg():
    a = _final_params(["method=fedavg"])
    b = _final_params(["method=fedprox", "method.client.mu=0.0"])
    assert torch.equal(a, b)


def test_fedprox_local_steps_by_hand():
    # mu > 0: w <- w - lr (grad CE(w) + mu (w - theta_t)) with momentum 0.5, three full-batch
    # steps on a 4-sample linear problem, written out without the client code.
    from fedcore.core import clients
    from fedcore.core.data.client_data import ClientData
    from fedcore.core.models.layout import ParamLayout, flat_params, load_flat_params
    from fedcore.core.records import LocalContext, LocalSchedule

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    theta = flat_params(model).clone()
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    sched = LocalSchedule(steps=3, batch_size=4, lr=0.1, momentum=0.5)
    ctx = LocalContext(model, theta, {}, ParamLayout.from_model(model),
                       ClientData(0, x, y, x[:0], y[:0]), sched, {}, torch.Generator(), 1)
    mu = 0.5
    update = run_client(clients.build({"algorithm": "fedprox", "mu": mu}), ctx)
    w, buf = theta.clone(), torch.zeros_like(theta)
    for _ in range(3):
        load_flat_params(model, w)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()]) + mu * (w - theta)
        buf = 0.5 * buf + g
        w = w - 0.1 * buf
    torch.testing.assert_close(update.delta, w - theta, atol=1e-6, rtol=0)
    plain = clients.build({"algorithm": "fedprox", "mu": 0.0})
    load_flat_params(model, theta)
    assert not torch.allclose(run_client(plain, ctx).delta, update.delta, atol=1e-4)
