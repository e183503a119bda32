"""Ditto (docs/methods/ditto.md): persistent personal models, proximal pull to theta_t, metrics."""

import math

import pytest
import torch

from fedcore.core import clients
from fedcore.core.clients.template import run_follow_up
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation

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
    run_round(sim, 1)
    kept = {k: sim.store[k]["ditto_personal"].clone() for k in first}
    for k in set(range(6)) - first:
        assert "ditto_personal" not in sim.store[k]
    run_round(sim, 2)
    for k in resting:
        assert torch.equal(sim.store[k]["ditto_personal"], kept[k])
        assert not torch.equal(kept[k], sim.params)
    for k in second & first:
        assert not torch.equal(sim.store[k]["ditto_personal"], kept[k])


def _personal_context(lam, momentum, steps=3):
    """A one-client LocalContext on a 4-sample linear problem, with theta_t != v_k."""
    from fedcore.core.data.client_data import ClientData
    from fedcore.core.models.layout import ParamLayout, flat_params
    from fedcore.core.records import LocalContext, LocalSchedule

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    layout = ParamLayout.from_model(model)
    theta = flat_params(model).clone()
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    data = ClientData(0, x, y, x[:0], y[:0])
    sched = LocalSchedule(steps=steps, batch_size=4, lr=0.1, momentum=momentum)
    algo = clients.build({"algorithm": "ditto", "lam": lam})
    state = {"ditto_personal": theta + 0.5, "ditto_personal_buffers": {}}
    ctx = LocalContext(model, theta, {}, layout, data, sched, state, torch.Generator(), 1)
    return algo, ctx, model, x, y


def _spec_personal_steps(model, v, theta, x, y, lam, lr, momentum, steps):
    """SGD with momentum on grad F_k(v) + lam (v - theta) (ditto.md, as easyFL does)."""
    from fedcore.core.models.layout import load_flat_params

    buf = torch.zeros_like(v)
    for _ in range(steps):
        load_flat_params(model, v)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()]) + lam * (v - theta)
        buf = momentum * buf + g
        v = v - lr * buf
    return v


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_personal_lambda_term_goes_through_the_optimiser_with_momentum(momentum):
    lam = 2.0
    algo, ctx, model, x, y = _personal_context(lam, momentum)
    v0, theta = ctx.state["ditto_personal"].clone(), ctx.global_params.clone()
    run_follow_up(ctx, algo.personal_training(ctx))
    expected = _spec_personal_steps(model, v0, theta, x, y, lam, 0.1, momentum, 3)
    torch.testing.assert_close(ctx.state["ditto_personal"], expected, atol=1e-6, rtol=0)


def test_personal_pull_toward_the_global_model_is_the_sgd_step():
    # no data gradient (lr 0.1, lam 1, no momentum): v - theta shrinks by (1 - lr lam) a step
    algo, ctx, model, x, y = _personal_context(1.0, 0.0, steps=1)
    v0, theta = ctx.state["ditto_personal"].clone(), ctx.global_params.clone()
    run_follow_up(ctx, algo.personal_training(ctx))
    from fedcore.core.models.layout import load_flat_params

    load_flat_params(model, v0)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(
        ctx.state["ditto_personal"], v0 - 0.1 * grad - 0.1 * (v0 - theta), atol=1e-6, rtol=0
    )


@pytest.mark.slow
def test_global_model_trains_exactly_as_the_inner_objective():
    # Ditto trains sequentially; the FedAvg reference must too for bit equality
    fedavg = Simulation(load_config(None, ["method=fedavg", *SMALL, "engine=sequential"]))
    ditto = _sim()
    for r in (1, 2):
        run_round(ditto, r)
        run_round(fedavg, r)
    assert torch.equal(ditto.params, fedavg.params)


@pytest.mark.slow
def test_personal_metrics_and_unsampled_clients_use_the_global_model():
    result = _sim("method.client.personal_steps=3", "rounds=1").run()
    metrics, table = result.history[-1], result.client_tables[-1]
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


INNER_SCAFFOLD = ["method=scaffold", "local.momentum=0",
                  "method.client={algorithm: ditto, inner: {algorithm: scaffold}}"]


def test_ditto_around_scaffold_sends_and_commits_the_inner_control_variates():
    """Ditto's global update is its inner objective's: with SCAFFOLD inside, the uplink carries
    Delta c_i, c_i is committed, and the global model is plain SCAFFOLD's bit for bit (the
    personal model trains after it, from the same generator)."""
    ditto = Simulation(load_config(None, [*SMALL, *INNER_SCAFFOLD]))
    assert ditto.client_algo.uplink == ("delta", "delta_c")
    ditto.run()
    plain = Simulation(load_config(None, [*SMALL, "method=scaffold", "local.momentum=0"]))
    plain.run()
    assert torch.equal(ditto.params, plain.params)
    sampled = [k for k in range(6) if "ditto_personal" in ditto.store[k]]
    assert sampled
    for k in sampled:
        assert torch.equal(ditto.store[k]["scaffold_c"], plain.store[k]["scaffold_c"])


@pytest.mark.parametrize(("overrides", "message"), [
    (["method=ditto", "method.client.inner={algorithm: scaffold}"],
     r"^method\.aggregator\.rule: client scaffold needs rule 'scaffold', got 'fedavg' "
     r"\(ditto's inner objective scaffold\)$"),
    (["method=scaffold", "method.client={algorithm: ditto}"],
     r"^method\.client\.algorithm: rule scaffold needs client 'scaffold' \(or 'ditto' with "
     r"inner 'scaffold'\), got 'ditto' with inner 'fedavg'$"),
    (["method=scafcom_topk", "method.client={algorithm: ditto, inner: {algorithm: fedprox}}"],
     r"^method\.client\.algorithm: rule scafcom needs client 'scafcom'"),
])
def test_ditto_is_held_to_its_inner_objectives_config_rules(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*SMALL, *overrides])
