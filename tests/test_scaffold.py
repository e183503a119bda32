"""SCAFFOLD and SCAFCOM: the spec vectors on a toy quadratic, the identities, config rules."""

import pytest
import torch
from torch import nn

from fedcore.core import aggregators, clients, compression
from fedcore.core.clients.scafcom import MOMENTUM, ScafcomClient
from fedcore.core.clients.scaffold import CONTROL, ScaffoldClient
from fedcore.core.clients.template import run_client
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.data.client_data import ClientData
from fedcore.core.models.layout import ParamLayout, load_flat_params
from fedcore.core.records import LocalContext, LocalSchedule
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.records.plan import Commit
from fedcore.core.round.probes import run_round

A = (1.0, 2.0, 4.0)
B = ((1.0, 0.0), (0.0, 1.0), (-1.0, -1.0))
SCHED = LocalSchedule(steps=2, batch_size=2, lr=0.1)


class Point(nn.Module):
    """theta = y in R^2; the data carry the client's index."""

    def __init__(self):
        super().__init__()
        self.y = nn.Parameter(torch.zeros(2, dtype=torch.float64))


def quadratic(cls):
    """The client class with f_i(y) = a_i/2 ||y - b_i||^2 as its local loss (data: i)."""

    class Quadratic(cls):
        def loss(self, b):
            i = int(b.x[0])
            return 0.5 * A[i] * (b.model.y - torch.tensor(B[i], dtype=torch.float64)).pow(2).sum()

    return Quadratic


def data(i):
    x = torch.full((2, 1), float(i))
    return ClientData(i, x, torch.zeros(2, dtype=torch.long), x[:0], torch.zeros(0))


def play(client, agg, x, sampled, stores, comp=None, reject=()):
    """One round of the loop's phases by hand; returns the new x and the updates."""
    model = Point()
    layout = ParamLayout.from_model(model)
    down = agg.broadcast()
    ups, sent_all = [], []
    for i in sampled:
        ctx = LocalContext(model, x, {}, layout, data(i), SCHED, stores[i],
                           torch.Generator().manual_seed(0), 1, server_payload=down)
        up = run_client(client, ctx)
        sent = {}
        for name in client.uplink:
            vec = up.delta if name == "delta" else up.extras[name]
            sent[name] = vec if comp is None else comp.apply(vec)[0]
        ups.append(up)
        sent_all.append(sent)
    ok = [i not in reject for i in sampled]
    rows = [k for k, good in enumerate(ok) if good]
    extras = {n: torch.stack([sent_all[k][n] for k in rows]) for n in client.uplink if n != "delta"}
    deltas = (torch.stack([sent_all[k]["delta"] for k in rows]) if "delta" in client.uplink
              else torch.zeros(len(rows), 2, dtype=torch.float64))
    batch = UpdateBatch(
        deltas=deltas, num_samples=torch.tensor([2] * len(rows)),
        stats={"local_lr": torch.tensor([ups[k].stats["local_lr"] for k in rows])},
        client_ids=torch.tensor([sampled[k] for k in rows]), extras=extras,
        num_steps=torch.tensor([ups[k].num_steps for k in rows]),
    )
    res = agg.aggregate(batch)
    for i, up, sent, good in zip(sampled, ups, sent_all, ok, strict=True):
        client.commit(Commit(stores[i], up, sent, good))
    return x + res.step, ups


def _setup(client_spec, rule_spec):
    client = quadratic(type(clients.build(client_spec)))(clients.build(client_spec).hp)
    agg = aggregators.build(rule_spec)
    agg.setup(3, ParamLayout.from_model(Point()))
    return client, agg, [{} for _ in range(3)]


def _t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_scaffold_spec_vector():
    client, agg, stores = _setup({"algorithm": "scaffold"}, {"rule": "scaffold"})
    x, ups = play(client, agg, torch.zeros(2, dtype=torch.float64), [0, 1], stores)
    torch.testing.assert_close(ups[0].delta, _t(0.19, 0.0))
    torch.testing.assert_close(ups[0].extras["delta_c"], _t(-0.95, 0.0))
    torch.testing.assert_close(ups[1].extras["delta_c"], _t(0.0, -1.8))
    torch.testing.assert_close(x, _t(0.095, 0.18))
    torch.testing.assert_close(agg.c, _t(-0.95 / 3, -0.6))
    x, ups = play(client, agg, x, [1, 2], stores)
    torch.testing.assert_close(ups[0].delta, _t(0.0228, 0.0792))
    torch.testing.assert_close(ups[0].extras["delta_c"], _t(0.202667, 0.204), atol=1e-6, rtol=0)
    torch.testing.assert_close(ups[1].delta, _t(-0.650133, -0.6592), atol=1e-6, rtol=0)
    torch.testing.assert_close(stores[2][CONTROL], _t(3.567333, 3.896), atol=1e-6, rtol=0)
    torch.testing.assert_close(x, _t(-0.218667, -0.11), atol=1e-6, rtol=0)
    torch.testing.assert_close(agg.c, _t(0.94, 0.766667), atol=1e-6, rtol=0)
    # invariant: c is the mean of all N client control variates
    mean = sum(s.get(CONTROL, torch.zeros(2, dtype=torch.float64)) for s in stores) / 3
    torch.testing.assert_close(agg.c, mean)


def test_scaffold_reconstruct_equals_both_and_halves_the_uplink():
    both = _setup({"algorithm": "scaffold"}, {"rule": "scaffold"})
    rec = _setup({"algorithm": "scaffold", "uplink": "reconstruct"}, {"rule": "scaffold"})
    assert rec[0].uplink == ("delta",) and both[0].uplink == ("delta", "delta_c")
    xb = xr = torch.zeros(2, dtype=torch.float64)
    for sampled in ([0, 1], [1, 2], [0, 2]):
        xb, _ = play(*both[:2], xb, sampled, both[2])
        xr, _ = play(*rec[:2], xr, sampled, rec[2])
        torch.testing.assert_close(xr, xb)
        torch.testing.assert_close(rec[1].c, both[1].c, atol=1e-6, rtol=1e-6)


def test_option2_control_is_the_mean_raw_gradient_along_the_path():
    """c_i+ = (1/K) sum_k g_k (raw minibatch gradient + weight decay) for a random problem."""
    gen = torch.Generator().manual_seed(3)
    a, b = torch.rand(4, generator=gen) + 0.5, torch.randn(4, generator=gen)

    class Recording(ScaffoldClient):
        def loss(self, batch):
            w = batch.model.w
            return 0.5 * (a * (w - b).pow(2)).sum() + 0.1 * (w * batch.x.sum()).sum()

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(4, dtype=torch.float64))

    client, model = Recording(), W()
    layout = ParamLayout.from_model(model)
    x = torch.randn(20, 1, dtype=torch.float64, generator=gen)
    cd = ClientData(0, x, torch.zeros(20, dtype=torch.long), x[:0], torch.zeros(0))
    sched = LocalSchedule(steps=5, batch_size=4, lr=0.05, weight_decay=0.01)
    state = {CONTROL: torch.randn(4, dtype=torch.float64, generator=gen)}
    c = torch.randn(4, dtype=torch.float64, generator=gen)
    client.raw = []  # each step's raw gradient, recorded by backward before the SGD step
    wd = sched.weight_decay
    model.w.register_hook(lambda g: client.raw.append(g.clone() + wd * model.w.detach()))
    ctx = LocalContext(model, torch.randn(4, dtype=torch.float64, generator=gen), {}, layout, cd,
                       sched, state, torch.Generator().manual_seed(1), 1,
                       server_payload={"c": c})
    up = run_client(client, ctx)
    assert up.num_steps == 5 == len(client.raw)
    c_new = state[CONTROL] + up.extras["delta_c"]
    torch.testing.assert_close(c_new, torch.stack(client.raw).mean(0), atol=1e-12, rtol=0)


def test_rejected_client_commits_nothing():
    client, agg, stores = _setup({"algorithm": "scaffold"}, {"rule": "scaffold"})
    play(client, agg, torch.zeros(2, dtype=torch.float64), [0, 1], stores, reject=(1,))
    assert CONTROL in stores[0] and CONTROL not in stores[1]
    mean = sum(s.get(CONTROL, torch.zeros(2, dtype=torch.float64)) for s in stores) / 3
    torch.testing.assert_close(agg.c, mean)  # the invariant survives the rejection


def test_scafcom_spec_vector():
    client, agg, stores = _setup({"algorithm": "scafcom", "beta": 0.2}, {"rule": "scafcom"})
    top1 = compression.build({"compressor": "topk", "k_frac": 0.5})
    x, ups = play(client, agg, torch.zeros(2, dtype=torch.float64), [0, 1], stores, top1)
    assert client.uplink == ("cv_increment",)
    torch.testing.assert_close(ups[0].extras["cv_increment"], _t(-0.19, 0.0))
    torch.testing.assert_close(x, _t(0.019, 0.036))
    torch.testing.assert_close(agg.c, _t(-0.063333, -0.12), atol=1e-6, rtol=0)
    x, ups = play(client, agg, x, [1, 2], stores, top1)
    torch.testing.assert_close(stores[1][MOMENTUM], _t(0.008107, -0.63984), atol=1e-6, rtol=0)
    torch.testing.assert_close(stores[1][CONTROL], _t(0.0, -0.63984), atol=1e-6, rtol=0)
    torch.testing.assert_close(stores[2][CONTROL], _t(0.0, 0.66784), atol=1e-6, rtol=0)
    torch.testing.assert_close(x, _t(0.031667, 0.0212), atol=1e-6, rtol=0)
    torch.testing.assert_close(agg.c, _t(-0.063333, 0.009333), atol=1e-6, rtol=0)
    mean = sum(s.get(CONTROL, torch.zeros(2, dtype=torch.float64)) for s in stores) / 3
    torch.testing.assert_close(agg.c, mean)


def test_scafcom_with_beta_one_and_no_compression_is_scaffold():
    client, agg, stores = _setup({"algorithm": "scafcom", "beta": 1.0}, {"rule": "scafcom"})
    x = torch.zeros(2, dtype=torch.float64)
    x, _ = play(client, agg, x, [0, 1], stores)
    x, _ = play(client, agg, x, [1, 2], stores)
    torch.testing.assert_close(x, _t(-0.218667, -0.11), atol=1e-6, rtol=0)
    torch.testing.assert_close(agg.c, _t(0.94, 0.766667), atol=1e-6, rtol=0)
    assert isinstance(client, ScafcomClient)


@pytest.mark.parametrize(("overrides", "field"), [
    (["method=scaffold", "local.momentum=0.9"], "local.momentum"),
    (["method=scaffold", "method.compression.compressor=topk"], "method.compression.compressor"),
    (["method=scaffold", "method.aggregator={rule: fedavg}"], "method.aggregator.rule"),
    (["method=fedavg", "method.aggregator={rule: scaffold}"], "method.client.algorithm"),
    (["method=scaffold", "method.client.control=option1", "method.client.uplink=reconstruct"],
     "method.client.uplink"),
    (["method=scafcom_topk", "method.compression.error_feedback=ef"],
     "method.compression.error_feedback"),
    (["method=scafcom_topk", "local.momentum=0.5"], "local.momentum"),
    (["method=scafcom_topk", "method.client.beta=0"], "method.client.beta"),
])
def test_config_rules_are_one_line_errors(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")) as exc:
        load_config(None, ["model.name=mlp", *overrides])
    assert "\n" not in str(exc.value)


def test_scafcom_rejected_client_commits_neither_v_nor_c():
    client, agg, stores = _setup({"algorithm": "scafcom"}, {"rule": "scafcom"})
    play(client, agg, torch.zeros(2, dtype=torch.float64), [0, 1], stores, reject=(1,))
    assert MOMENTUM in stores[0] and CONTROL in stores[0]
    assert MOMENTUM not in stores[1] and CONTROL not in stores[1]


def test_parameter_without_gradient_is_still_corrected():
    """A parameter unused by the loss moves by -lr K Gamma and gets c_i+ = 0 (raw gradient 0)."""

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Parameter(torch.zeros(1, dtype=torch.float64))
            self.unused = nn.Parameter(torch.zeros(1, dtype=torch.float64))

    class Client(ScaffoldClient):
        def loss(self, b):
            return 0.5 * (b.model.used - 1.0).pow(2).sum()

    model = Two()
    layout = ParamLayout.from_model(model)
    ctx = LocalContext(model, torch.zeros(2, dtype=torch.float64), {}, layout, data(0), SCHED, {},
                       torch.Generator().manual_seed(0), 1, server_payload={"c": _t(0.0, 0.5)})
    up = run_client(Client(), ctx)
    assert float(up.delta[1]) == pytest.approx(-0.1 * 2 * 0.5)  # -lr K Gamma
    assert float(up.extras["delta_c"][1]) == pytest.approx(0.0, abs=1e-12)  # c_i+ = 0


def test_option1_runs_in_train_mode_and_commits_the_full_gradient():
    """control=option1 end to end: c_i+ is grad F_i(theta_t) over the client's train split,
    taken in train mode like the local steps (it ran in eval mode), and c stays the mean of
    the c_i."""
    from fedcore.core.round.simulation import Simulation

    sim = Simulation(load_config(None, [
        "method=scaffold", "method.client.control=option1", "model.name=mlp", "rounds=2",
        "dataset.num_clients=4", "clients_per_round=2", "local.steps=2", "local.batch_size=8"]))
    start = sim.params.clone()
    modes: list[bool] = []
    sim.model.register_forward_hook(lambda mod, inp, out: modes.append(mod.training))
    run_round(sim, 1)
    assert modes and all(modes)  # local steps and the full pass: train mode
    k = int(sim.sample_clients(1)[0])
    model = sim.model
    load_flat_params(model, start)
    model.zero_grad()
    data = sim.data.clients[k]
    torch.nn.functional.cross_entropy(model(data.x_train), data.y_train).backward()
    want = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(sim.store[k]["scaffold_c"], want, rtol=1e-4, atol=1e-6)
    run_round(sim, 2)
    controls = torch.stack([sim.store[j].get("scaffold_c", torch.zeros_like(start))
                            for j in range(4)])
    torch.testing.assert_close(sim.aggregator.c, controls.mean(dim=0), rtol=1e-5, atol=1e-7)
