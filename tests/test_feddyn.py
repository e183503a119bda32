"""FedDyn (docs/methods/feddyn.md): the client's regularised steps and gradient, the server's h."""

import pytest
import torch
from torch import nn

from fedcore.core import aggregators, clients
from fedcore.core.clients.feddyn import GRADIENT, FedDynClient
from fedcore.core.clients.template import run_client
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.data.client_data import ClientData
from fedcore.core.engines import sequential
from fedcore.core.engines.vectorised import VectorisedEngine
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records import LocalContext, LocalSchedule
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.records.plan import Commit
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation

from .conftest import TINY

ALPHA = 0.5
A, B = 2.0, torch.tensor([1.0, -1.0], dtype=torch.float64)


class Point(nn.Module):
    def __init__(self):
        super().__init__()
        self.y = nn.Parameter(torch.zeros(2, dtype=torch.float64))


class Quadratic(FedDynClient):
    """L_k(y) = a/2 ||y - b||^2."""

    def loss(self, b):
        return 0.5 * A * (b.model.y - B).pow(2).sum()


def test_local_steps_and_stored_gradient_follow_the_update_rules():
    model = Point()
    x = torch.tensor([0.3, 0.2], dtype=torch.float64)
    g0 = torch.tensor([0.4, -0.1], dtype=torch.float64)
    state = {GRADIENT: g0.clone()}
    sched = LocalSchedule(steps=3, batch_size=2, lr=0.1)
    data = ClientData(0, torch.zeros(2, 1), torch.zeros(2, dtype=torch.long), torch.zeros(0, 1),
                      torch.zeros(0))
    client = Quadratic(FedDynClient.HParams(alpha=ALPHA))
    ctx = LocalContext(model, x, {}, ParamLayout.from_model(model), data, sched, state,
                       torch.Generator().manual_seed(0), 1)
    up = run_client(client, ctx)
    y = x.clone()
    for _ in range(3):  # grad of L_k(y) - <g0, y> + alpha/2 ||y - x||^2
        y = y - 0.1 * (A * (y - B) - g0 + ALPHA * (y - x))
    torch.testing.assert_close(up.delta, y - x, rtol=0, atol=1e-12)
    assert up.stats["feddyn_alpha"] == ALPHA
    client.commit(Commit(state, up, {"delta": up.delta}, False))  # rejected: grad_k kept
    assert torch.equal(state[GRADIENT], g0)
    client.commit(Commit(state, up, {"delta": up.delta}, True))
    torch.testing.assert_close(state[GRADIENT], g0 - ALPHA * up.delta, rtol=0, atol=1e-15)


def _batch(deltas):
    return UpdateBatch(deltas=deltas, num_samples=torch.ones(len(deltas)),
                       layout=ParamLayout.from_model(nn.Linear(1, 3, bias=False)),
                       stats={"feddyn_alpha": torch.full((len(deltas),), ALPHA)})


def test_server_h_is_minus_alpha_times_the_running_sum_of_mean_deltas():
    """Full participation: h_t = -alpha sum_s mean_k delta_k^s and the step is
    mean_k delta_k - h_t / alpha; partial participation divides by N, not by m."""
    rule = aggregators.build({"rule": "feddyn"})
    rule.setup(4, ParamLayout.from_model(nn.Linear(1, 3, bias=False)))
    gen = torch.Generator().manual_seed(1)
    running = torch.zeros(3)
    for _ in range(3):
        deltas = torch.randn(4, 3, generator=gen)
        step = rule.aggregate(_batch(deltas)).step
        running += deltas.mean(0)
        torch.testing.assert_close(rule.h, -ALPHA * running)
        torch.testing.assert_close(step, deltas.mean(0) + running)
    saved = rule.state_dict()
    part = torch.randn(2, 3, generator=gen)
    rule.aggregate(_batch(part))
    torch.testing.assert_close(rule.h, saved["h"] - ALPHA * part.sum(0) / 4)
    rule.load_state_dict(saved)
    assert torch.equal(rule.h, saved["h"])


def test_a_short_run_learns_and_h_is_the_mean_of_the_client_gradients():
    """Every accepted delta enters both h and its client's grad_k, so h = (1/N) sum_k grad_k."""
    sim = Simulation(load_config(None, [*TINY, "method=feddyn", "method.client.alpha=0.1"]))
    result = sim.run()
    grads = [sim.store[k].get(GRADIENT, torch.zeros_like(sim.params)) for k in range(6)]
    torch.testing.assert_close(sim.aggregator.h, torch.stack(grads).mean(0), rtol=0,
                               atol=1e-6)
    assert float(sim.aggregator.h.norm()) > 0
    assert result.summary["final/accuracy"] > 0.5


def test_the_engines_agree_once_clients_carry_gradients():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        sim = Simulation(load_config(None, [*TINY, "method=feddyn", "method.client.alpha=0.1",
                                            "clients_per_round=4", "local.steps=3"]))
        for c in sim.data.clients:
            c.x_train = c.x_train.double()
        run_round(sim, 1)
        run_round(sim, 2)
        sampled = list(map(int, sim.sample_clients(3)))
        rc = sim.round_context(3)
        seq = sequential.train_round(rc, sampled)
        engine = VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device)
        vec = engine.train_round(rc, sampled)
    finally:
        torch.set_default_dtype(default)
    assert engine.last_path == "vectorised"
    assert any(GRADIENT in sim.store[c] for c in sampled)
    for c in sampled:
        assert torch.allclose(vec[c].delta, seq[c].delta, rtol=0, atol=1e-12)


def test_the_rule_needs_the_feddyn_client():
    with pytest.raises(ConfigError, match="rule feddyn needs client 'feddyn'"):
        load_config(None, ["method=feddyn", "method.client={algorithm: fedavg}"])
    with pytest.raises(ValueError, match="alpha"):
        clients.build({"algorithm": "feddyn", "alpha": 0.0})
