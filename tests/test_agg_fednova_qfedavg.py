"""FedNova and q-FedAvg (docs/methods/): hand-computed steps, reductions, client norms."""

from __future__ import annotations

from types import SimpleNamespace

import pydantic
import pytest
import torch

from fedcore.core import aggregators, clients
from fedcore.core.clients.extras import accumulation_norm
from fedcore.core.clients.template import run_client
from fedcore.core.data.client_data import ClientData
from fedcore.core.models import build_model
from fedcore.core.models.layout import ParamLayout, flat_params
from fedcore.core.records import LocalContext, LocalSchedule
from fedcore.core.records.aggregate import UpdateBatch


def batch(deltas, n, **stats) -> UpdateBatch:
    d = torch.as_tensor(deltas, dtype=torch.float64)
    return UpdateBatch(d, torch.tensor(n), stats={k: torch.tensor(v) for k, v in stats.items()})


# --- FedNova ---------------------------------------------------------------------------------


def test_fednova_equals_fedavg_when_all_clients_ran_the_same_steps():
    torch.manual_seed(0)
    deltas, n = torch.randn(4, 9), [5, 17, 3, 40]
    for tau in (1.0, 7.0, 5.61):
        b = UpdateBatch(deltas, torch.tensor(n), stats={"accumulation_norm": torch.full((4,), tau)})
        nova = aggregators.build({"rule": "fednova"}).aggregate(b).step
        torch.testing.assert_close(nova, aggregators.build({"rule": "fedavg"}).aggregate(b).step)
    assert nova.dtype == torch.float32


def test_fednova_two_clients_by_hand():
    # p = (1/4, 3/4); d_1 = -(2, 0)/2, d_2 = -(0, 4)/4; tau_eff = 2/4 + 3*4/4 = 3.5;
    # step = -tau_eff (p_1 d_1 + p_2 d_2) = 3.5 * (0.25, 0.75) = (0.875, 2.625).
    b = batch([[2.0, 0.0], [0.0, 4.0]], [1, 3], accumulation_norm=[2.0, 4.0])
    agg = aggregators.build({"rule": "fednova"})
    res = agg.aggregate(b)
    torch.testing.assert_close(res.step, torch.tensor([0.875, 2.625], dtype=torch.float64))
    assert res.metrics["fednova/tau_eff"] == pytest.approx(3.5)
    fedavg = aggregators.build({"rule": "fedavg"}).aggregate(b).step
    torch.testing.assert_close(fedavg, torch.tensor([0.5, 3.0], dtype=torch.float64))  # differs
    lr2 = aggregators.build({"rule": "fednova", "server_lr": 2.0}).aggregate(b).step
    torch.testing.assert_close(lr2, torch.tensor([1.75, 5.25], dtype=torch.float64))


def test_fednova_validation_and_needs():
    assert aggregators.build({"rule": "fednova"}).needs == frozenset({"accumulation_norm"})
    with pytest.raises(pydantic.ValidationError):
        aggregators.build({"rule": "fednova", "server_lr": 0.0})


def _algo(mu: float | None):
    """The plan of a client (its proximal mu is what the accumulation norm reads)."""
    spec = {"algorithm": "fedavg"} if mu is None else {"algorithm": "fedprox", "mu": mu}
    x, y = torch.zeros(4, 1), torch.zeros(4, dtype=torch.long)
    ctx = SimpleNamespace(data=ClientData(0, x, y, x, y), schedule=LocalSchedule(),
                          generator=torch.Generator())
    return clients.build(spec).plan(ctx)


@pytest.mark.parametrize(
    ("momentum", "lr", "mu", "tau", "expected"),
    [
        (0.0, 0.05, None, 5, 5.0),  # plain SGD: tau
        (0.9, 0.05, None, 3, 1.0 + 1.9 + 2.71),  # sum_{j=1..3} (1 - 0.9^j) / 0.1
        (0.5, 0.05, None, 4, 1.0 + 1.5 + 1.75 + 1.875),
        (0.0, 0.1, 1.0, 3, 1.0 + 0.9 + 0.81),  # proximal: sum_{j=0..2} (1 - 0.1)^j
        (0.0, 0.2, 0.5, 2, 1.0 + 0.9),
        (0.9, 0.05, 0.0, 3, 1.0 + 1.9 + 2.71),  # FedProx with mu = 0: the momentum formula
    ],
)
def test_accumulation_norm_formulas(momentum, lr, mu, tau, expected):
    ctx = SimpleNamespace(schedule=LocalSchedule(lr=lr, momentum=momentum))
    assert accumulation_norm(None, ctx, tau, _algo(mu)) == pytest.approx(expected)


@pytest.mark.slow
def test_client_sends_accumulation_norm():
    torch.manual_seed(0)
    model = build_model("mlp", (1, 4, 4), 3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 1, 4, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    for momentum in (0.0, 0.5):
        ctx = LocalContext(
            model=model,
            global_params=flat_params(model).clone(),
            global_buffers={},
            layout=ParamLayout.from_model(model),
            data=ClientData(0, x, y, x[:0], y[:0]),
            schedule=LocalSchedule(epochs=1, batch_size=8, lr=0.05, momentum=momentum),
            state={},
            generator=torch.Generator().manual_seed(1),
            round=1,
            needs=frozenset({"accumulation_norm"}),
        )
        up = run_client(clients.build({"algorithm": "fedavg"}), ctx)
        assert up.num_steps == 5
        expected = 5.0 if momentum == 0 else sum((1 - 0.5**j) / 0.5 for j in range(1, 6))
        assert up.stats["accumulation_norm"] == pytest.approx(expected)


# --- q-FedAvg --------------------------------------------------------------------------------


def test_qfedavg_q0_is_the_unweighted_mean():
    # q = 0: D_k = -L Delta_k, h_k = L -> step = sum_k L Delta_k / (m L), whatever n_k and F_k.
    b = batch([[1.0, 0.0], [0.0, 3.0]], [1, 100], loss_before=[0.2, 5.0], local_lr=[0.1, 0.1])
    step = aggregators.build({"rule": "qfedavg", "q": 0.0}).aggregate(b).step
    torch.testing.assert_close(step, torch.tensor([0.5, 1.5], dtype=torch.float64))


def test_qfedavg_q1_two_clients_by_hand():
    # lr 0.5 -> L = 2. Delta W_1 = (-2, 0), Delta W_2 = (0, -2), both ||.||^2 = 4; F = (1, 3).
    # D_1 = (-2, 0), D_2 = (0, -6); h_1 = 4 + 2*1 = 6, h_2 = 4 + 2*3 = 10;
    # step = -(D_1 + D_2) / 16 = (0.125, 0.375).
    b = batch([[1.0, 0.0], [0.0, 1.0]], [50, 50], loss_before=[1.0, 3.0], local_lr=[0.5, 0.5])
    agg = aggregators.build({"rule": "qfedavg", "q": 1.0})
    res = agg.aggregate(b)
    torch.testing.assert_close(res.step, torch.tensor([0.125, 0.375], dtype=torch.float64))
    assert res.metrics["qfedavg/L"] == 2.0


def test_qfedavg_L_is_one_over_the_rounds_local_lr():
    # lr 0.01 -> L = 100. Delta = (0.01, 0), F = 1, q = 1: Delta W = (-1, 0), ||Delta W||^2 = 1,
    # D = (-1, 0), h = 1 * 1 + 100 * 1 = 101, step = (1/101, 0). (A fixed L = 20 gives 1/21.)
    b = batch([[0.01, 0.0]], [10], loss_before=[1.0], local_lr=[0.01])
    step = aggregators.build({"rule": "qfedavg", "q": 1.0}).aggregate(b).step
    torch.testing.assert_close(step, torch.tensor([1 / 101, 0.0], dtype=torch.float64))


def test_qfedavg_matches_the_section_7_4_formulas_on_random_updates():
    torch.manual_seed(1)
    theta = torch.randn(6, dtype=torch.float64)
    local = theta + 0.1 * torch.randn(3, 6, dtype=torch.float64)
    losses = torch.tensor([0.7, 2.3, 1.1], dtype=torch.float64)
    q, lip = 2.0, 20.0
    num, den = torch.zeros(6, dtype=torch.float64), 0.0
    for k in range(3):
        fk = losses[k] + 1e-8
        dw = lip * (theta - local[k])
        num += fk**q * dw
        den += q * fk ** (q - 1) * dw.norm() ** 2 + lip * fk**q
    expected = theta - num / den
    stats = {"loss_before": losses.float(), "local_lr": torch.full((3,), 1 / lip)}
    b = UpdateBatch(local - theta, torch.ones(3), stats=stats)
    step = aggregators.build({"rule": "qfedavg", "q": q}).aggregate(b).step
    assert step.dtype == torch.float64
    torch.testing.assert_close(theta + step, expected)


def test_qfedavg_higher_loss_gains_weight_as_q_grows():
    # Orthogonal unit deltas: the step's coordinates are the clients' coefficients, whose ratio
    # is (F_2 / F_1)^q exactly.
    b = batch([[1.0, 0.0], [0.0, 1.0]], [1, 1], loss_before=[0.5, 2.0], local_lr=[0.05, 0.05])
    ratios = []
    for q in (0.0, 0.1, 1.0, 2.0, 5.0):
        step = aggregators.build({"rule": "qfedavg", "q": q}).aggregate(b).step
        ratios.append(float(step[1] / step[0]))
        assert ratios[-1] == pytest.approx(((2.0 + 1e-8) / (0.5 + 1e-8)) ** q, rel=1e-6)
    assert ratios == sorted(ratios) and ratios[0] == pytest.approx(1.0)


def test_qfedavg_validation_and_needs():
    assert aggregators.build({"rule": "qfedavg"}).needs == frozenset({"loss_before", "local_lr"})
    assert aggregators.build({"rule": "qfedavg"}).hp.q == 1.0
    for bad in ({"q": -1.0}, {"server_lr": 1.0}):
        with pytest.raises(pydantic.ValidationError):
            aggregators.build({"rule": "qfedavg", **bad})
    with pytest.raises(pydantic.ValidationError, match="L = 1 / local lr of the round"):
        aggregators.build({"rule": "qfedavg", "lipschitz": 20.0})


def test_qfedavg_L_follows_the_decayed_local_lr_in_a_run():
    from fedcore.core.compose.configure import load_config
    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    cfg = load_config(
        None, [*TINY, "method=qfedavg", "local.lr=0.1", "local.lr_decay=0.5", "local.steps=1"]
    )
    res = Simulation(cfg).run()
    # the decay starts at round 3, as CRAFT's resolve_round_lr (lr * 0.5^max(r - 2, 0))
    assert [h["qfedavg/L"] for h in res.history] == pytest.approx([10.0, 10.0, 20.0])
