"""FedQuad, TripletFL, QuadrupletFL, SupConFL, MOON against their docs/methods/ pages."""

import math

import pytest
import torch

from fedcore.core import clients
from fedcore.core.clients._tuplets import quadruplet_loss, sample_tuplets, triplet_loss
from fedcore.core.clients.moon import moon_contrastive
from fedcore.core.clients.supconfl import supcon_loss
from fedcore.core.clients.template import frozen_copy, run_client
from fedcore.core.compose.configure import load_config
from fedcore.core.data.client_data import ClientData
from fedcore.core.metrics import client_stat_metrics, representation_stats
from fedcore.core.models import build_model
from fedcore.core.models.layout import ParamLayout, flat_params, load_flat_params
from fedcore.core.records import LocalContext, LocalSchedule
from fedcore.core.records.plan import Batch
from fedcore.core.round.probes import run_round, train_client
from fedcore.core.round.simulation import Simulation

from .conftest import TINY


def _z(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_quadruplet_loss_equals_hand_computation():
    za, zp = _z([1.0, 0.0]), _z([0.0, 1.0])  # D(a,p) = 2
    zn1, zn2 = _z([-1.0, 0.0]), _z([0.0, -1.0])  # D(a,n1) = 4, D(a,n2) = 2, D(n1,n2) = 2
    # FedQuad: [2 - 4 + 1]_+ + [2 - 2 + 0.5]_+ = 0 + 0.5
    assert quadruplet_loss(za, zp, zn1, zn2, 1.0, 0.5).item() == pytest.approx(0.5)
    # both hinges active: m1 = 3 -> [2 - 4 + 3]_+ = 1, m2 = 0.7 -> 0.7
    assert quadruplet_loss(za, zp, zn1, zn2, 3.0, 0.7).item() == pytest.approx(1.7)
    # margins met: a = p, negatives far
    zero = quadruplet_loss(za, za, zn1, _z([-1.0, 0.0]), 1.0, 0.5)
    assert zero.item() == 0.0
    # QuadrupletFL: second hinge on D(n1,n2) = 2 -> [2 - 2 + 0.5]_+ ; with n2 = n1, D = 0
    chen = quadruplet_loss(za, zp, zn1, zn1, 1.0, 0.5, anchored=False)
    assert chen.item() == pytest.approx(0 + (2 - 0 + 0.5))
    # batch mean of each hinge
    two = quadruplet_loss(
        torch.cat([za, za]),
        torch.cat([zp, za]),
        torch.cat([zn1, zn1]),
        torch.cat([zn2, zn2]),
        3.0,
        0.5,
    )
    assert two.item() == pytest.approx((1.0 + 0.0) / 2 + (0.5 + 0.0) / 2)
    assert triplet_loss(za, zp, zn2, 1.0).item() == pytest.approx(1.0)


def _labels():
    # majority class 0 (40), class 1 (10), minority class 2 (2), singleton class 3
    return torch.tensor([0] * 40 + [1] * 10 + [2] * 2 + [3])


def test_sampler_returns_only_valid_quadruplets():
    y = _labels()
    q = sample_tuplets(y, 4, torch.Generator().manual_seed(0))
    assert q.shape == (52, 4)  # every sample of a class with >= 2 samples anchors once
    assert sorted(q[:, 0].tolist()) == list(range(52))  # singleton class 3 never anchors
    a, p, n1, n2 = (y[q[:, i]] for i in range(4))
    assert (q[:, 0] != q[:, 1]).all() and (a == p).all()
    assert (n1 != a).all() and (n2 != a).all() and (n2 != n1).all()


def test_sampler_visits_minority_classes_as_negatives():
    y = _labels()
    q = sample_tuplets(y, 4, torch.Generator().manual_seed(1))
    neg = torch.cat([y[q[:, 2]], y[q[:, 3]]])
    share = [(neg == c).float().mean().item() for c in range(4)]
    # classes drawn uniformly: class 2 (2 samples) and class 3 (1 sample) are frequent negatives
    assert share[2] > 0.2 and share[3] > 0.2, share


def test_sampler_is_seeded_and_falls_back():
    y = _labels()
    q1 = sample_tuplets(y, 4, torch.Generator().manual_seed(5))
    assert torch.equal(q1, sample_tuplets(y, 4, torch.Generator().manual_seed(5)))
    assert not torch.equal(q1, sample_tuplets(y, 4, torch.Generator().manual_seed(6)))
    two = torch.tensor([0, 0, 0, 1, 1])
    assert sample_tuplets(two, 4, torch.Generator()).shape == (0, 4)
    t = sample_tuplets(two, 3, torch.Generator().manual_seed(0))
    assert t.shape == (5, 3) and (two[t[:, 0]] == two[t[:, 1]]).all()
    assert (two[t[:, 2]] != two[t[:, 0]]).all()
    assert sample_tuplets(torch.zeros(6, dtype=torch.long), 3, torch.Generator()).numel() == 0


def _ctx(y, model, seed=0, state=None, steps=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(y), 1, 8, 8, generator=g)
    data = ClientData(0, x, y, x[:2], y[:2])
    return LocalContext(
        model=model,
        global_params=flat_params(model),
        global_buffers={},
        layout=ParamLayout.from_model(model),
        data=data,
        schedule=LocalSchedule(epochs=1, steps=steps, batch_size=4, lr=0.05),
        state=state if state is not None else {},
        generator=g,
        round=1,
    )


def _model(seed=0):
    torch.manual_seed(seed)
    return build_model("mlp", (1, 8, 8), 10)


@pytest.mark.parametrize(
    ("labels", "arity", "fallback", "kind"),
    [
        ([0, 1, 2, 3] * 5, 4, 0.0, None),
        ([0, 1] * 6, 3, 1.0, "triplet_fallback_clients"),
        ([4] * 12, 1, 1.0, "ce_only_clients"),
    ],
)
def test_fedquad_batches_and_fallback_stats(labels, arity, fallback, kind):
    y = torch.tensor(labels)
    algo = clients.build({"algorithm": "fedquad"})
    ctx = _ctx(y, _model())
    batches = algo.plan(ctx).batches
    if arity > 1:
        assert all(len(b) == arity * 4 for b in batches[:-1])  # B = 4 tuplets of `arity` images
        first = y[batches[0]].view(arity, -1)
        assert (first[0] == first[1]).all() and (first[2] != first[0]).all()
    up = run_client(algo, _ctx(y, _model()))
    assert up.stats["fedquad/fallback_clients"] == fallback
    if kind:
        assert up.stats[f"fedquad/{kind}"] == 1.0


def test_quadrupletfl_differs_from_fedquad_exactly_in_the_second_hinge():
    y = torch.tensor([0, 1, 2, 3] * 4)
    model = _model()
    quad, chen = (
        clients.build({"algorithm": "fedquad"}),
        clients.build({"algorithm": "quadrupletfl"}),
    )
    ctx = _ctx(y, model)
    plan = quad.plan(ctx)
    idx = plan.batches[0]
    x, yb = ctx.data.x_train[idx], y[idx]
    b = Batch(model, x, yb, ctx, None, plan.arity)
    diff = quad.loss(b) - chen.loss(b)
    za, zp, zn1, zn2 = torch.nn.functional.normalize(model.features(x), dim=1).view(4, 4, -1)
    d = lambda u, v: ((u - v) ** 2).sum(1)  # noqa: E731
    expected = (
        torch.relu(d(za, zp) - d(za, zn2) + 0.5) - torch.relu(d(za, zp) - d(zn1, zn2) + 0.5)
    ).mean()
    torch.testing.assert_close(diff, expected)
    assert diff.abs() > 0


def test_supcon_loss_equals_hand_computation():
    z = _z([1.0, 0.0], [1.0, 0.0], [0.0, 1.0])
    y = torch.tensor([0, 0, 1])
    tau = 0.5
    # anchors 0 and 1 each have one positive (cos 1) and one negative (cos 0); anchor 2 none
    expected = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + math.exp(0)))
    assert supcon_loss(z, y, tau).item() == pytest.approx(expected)
    assert supcon_loss(z, torch.tensor([0, 1, 2]), tau).item() == 0.0


def test_moon_contrastive_equals_hand_computation():
    z = _z([1.0, 0.0])
    zg, zp = _z([1.0, 1.0]), _z([0.0, 2.0])  # cos = 1/sqrt(2), 0
    tau = 0.5
    pos = (1 / math.sqrt(2)) / tau
    expected = -math.log(math.exp(pos) / (math.exp(pos) + 1.0))
    assert moon_contrastive(z, zg, zp, tau).item() == pytest.approx(expected)


def _flat(model):
    return torch.cat([p.reshape(-1) for p in model.parameters()])


@pytest.mark.slow
def test_moon_uses_the_previous_local_model_of_the_same_client():
    sim = Simulation(
        load_config(
            None,
            [
                "method=moon",
                *TINY,
                "rounds=2",
                "dataset.num_clients=3",
                "clients_per_round=3",
                "local.epochs=1",
            ],
        )
    )
    assert sim.model.head.in_features == 256 and "projection" in dict(sim.model.named_children())
    assert sim.layout.dim == flat_params(sim.model).numel()
    run_round(sim, 1)
    prev = {k: sim.store[k]["moon_prev"].clone() for k in range(3)}
    assert not torch.equal(prev[0], prev[1])
    algo = sim.client_algo
    seen = []
    original = algo.loss

    def spy(b):
        frozen = b.ctx.frozen
        if "prev" in frozen and not seen:
            seen.append((b.ctx.data.client_id, _flat(frozen["prev"]), _flat(frozen["global"])))
        return original(b)

    algo.loss = spy
    sim.params = sim.params + 0.0
    train_client(sim, 1, 2)
    cid, used_prev, used_glob = seen[0]
    assert cid == 1
    torch.testing.assert_close(used_prev, prev[1])
    torch.testing.assert_close(used_glob, sim.params)
    assert not torch.equal(sim.store[1]["moon_prev"], prev[1])  # updated after training


def test_representation_stats_on_hand_built_embeddings():
    z = _z([2.0, 0.0], [0.0, 3.0], [0.0, 1.0], [1.0, 1.0])  # normalised: e1, e2, e2, (1,1)/r2
    y = torch.tensor([0, 1, 1, 0])
    s = representation_stats(z, y)
    r = 1 / math.sqrt(2)
    mu0 = torch.tensor([(1 + r) / 2, r / 2], dtype=torch.float64)
    var0 = ((torch.tensor([1.0, 0.0], dtype=torch.float64) - mu0) ** 2).sum().item()
    assert s["repr/intra_class_variance"] == pytest.approx(var0 / 2)  # class 1 has variance 0
    inter = ((mu0 - torch.tensor([0.0, 1.0], dtype=torch.float64)) ** 2).sum().item()
    assert s["repr/inter_class_distance"] == pytest.approx(inter)
    assert s["repr/intra_inter_ratio"] == pytest.approx(var0 / 2 / inter)
    assert representation_stats(10 * z, y) == pytest.approx(s)  # scale free


def test_client_stats_with_slash_become_round_metrics():
    out = client_stat_metrics(
        [
            {"a/x_clients": 1.0, "a/loss": 2.0, "num_steps": 3.0},
            {"a/x_clients": 1.0, "a/loss": 4.0, "num_steps": 3.0},
        ]
    )
    assert out == {"a/x_clients": 2.0, "a/loss": 3.0}


@pytest.mark.slow
def test_fedquad_round_metrics_count_fallbacks():
    sim = Simulation(
        load_config(
            None, ["method=fedquad", *TINY, "rounds=2", "dataset.alpha=0.01", "local.epochs=1"]
        )
    )
    res = sim.run()
    for h in res.history:
        # docs/methods/fedquad.md: from each sampled client's labels: < 3 classes or no class
        # with 2 samples is a fallback; exactly 2 classes (one with 2 samples) trains on
        # triplets, else CE only.
        triplet = ce_only = 0
        for cid in map(int, sim.sample_clients(int(h["round"]))):
            _, counts = torch.unique(sim.data.clients[cid].y_train, return_counts=True)
            pairs = bool((counts >= 2).any())
            triplet += int(len(counts) == 2 and pairs)
            ce_only += int(len(counts) < 2 or not pairs)
        assert h["fedquad/triplet_fallback_clients"] == triplet
        assert h["fedquad/ce_only_clients"] == ce_only
        assert h["fedquad/fallback_clients"] == triplet + ce_only
        assert math.isfinite(h["repr/intra_inter_ratio"]) and h["repr/intra_inter_ratio"] > 0
    assert max(h["fedquad/fallback_clients"] for h in res.history) >= 1  # alpha 0.01: few classes


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"algorithm": "fedquad", "m1": 5.0}, "m1"),
        ({"algorithm": "fedquad", "m2": 2.0}, "m2"),  # D <= 2: a margin of 2 is never met
        ({"algorithm": "moon", "temperature": 0.0}, "temperature"),
        ({"algorithm": "supconfl", "temperature": 0.0}, "temperature"),  # for its value
    ],
)
def test_bad_hyperparameters_are_rejected(spec, field):
    with pytest.raises(ValueError, match=field) as err:
        clients.build(spec)
    assert "extra" not in str(err.value).lower()  # refused for its value, not as unknown
    clients.build({k: v for k, v in spec.items() if k != field})  # the rest is valid


def test_tuplet_distances_are_at_most_two_on_the_embedding_used():
    # The embeddings are L2-normalised post-ReLU features (non-negative), so
    # D = ||z_i - z_j||^2 = 2 - 2 cos <= 2: a margin >= 2 can never be met.
    from fedcore.core.clients._tuplets import sq_dist
    from fedcore.core.models import build_model

    torch.manual_seed(0)
    for name in ("mlp", "cnn", "smallcnn", "resnet20"):
        model = build_model(name, (1, 8, 8), 10).eval()
        with torch.no_grad():
            z = torch.nn.functional.normalize(model.embedding(torch.randn(64, 1, 8, 8)), dim=1)
        assert bool((z >= 0).all())  # implementation check: the embedding is post-ReLU
        d = sq_dist(z[:, None, :].expand(64, 64, -1).reshape(-1, z.shape[1]),
                    z[None, :, :].expand(64, 64, -1).reshape(-1, z.shape[1]))
        assert float(d.max()) <= 2.0 + 1e-6


@pytest.mark.parametrize(
    "spec",
    [
        {"algorithm": "fedquad", "m1": 2.0},
        {"algorithm": "fedquad", "m2": 2.5},
        {"algorithm": "quadrupletfl", "m1": 3.0},
        {"algorithm": "tripletfl", "margin": 2.0},
    ],
)
def test_margins_of_two_or_more_are_rejected(spec):
    with pytest.raises(ValueError, match="less than 2"):
        clients.build(spec)
    ok = {k: (1.99 if k in ("m1", "m2", "margin") else v) for k, v in spec.items()}
    clients.build(ok)


def test_moon_positive_is_the_global_model_and_negative_the_previous_local_model():
    torch.manual_seed(3)
    model = build_model("mlp", (1, 8, 8), 10)
    model.add_projection_head(8)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    prev = flat_params(model) + 0.3 * torch.randn(flat_params(model).numel())
    ctx = _ctx(y, model, state={"moon_prev": prev, "moon_prev_buffers": {}})
    ctx.global_params = flat_params(model) + 0.2 * torch.randn(prev.numel())
    algo = clients.build({"algorithm": "moon", "mu": 2.0, "temperature": 0.5, "out_dim": 8})
    frozen = algo.plan(ctx).frozen
    ctx.frozen = {name: frozen_copy(model, p, b) for name, (p, b) in frozen.items()}
    x = ctx.data.x_train
    got = algo.loss(Batch(model, x, y, ctx))

    def z_of(params):
        twin = build_model("mlp", (1, 8, 8), 10)
        twin.add_projection_head(8)
        load_flat_params(twin, params)
        with torch.no_grad():
            return twin.embedding(x)

    def cos(a, b):
        return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))

    z = model.embedding(x)
    pos, neg = cos(z, z_of(ctx.global_params)) / 0.5, cos(z, z_of(prev)) / 0.5
    ce = torch.nn.functional.cross_entropy(model.head(z), y)
    expected = ce + 2.0 * (-(pos.exp() / (pos.exp() + neg.exp())).log()).mean()
    swapped = ce + 2.0 * (-(neg.exp() / (pos.exp() + neg.exp())).log()).mean()
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, swapped)


@pytest.mark.parametrize(("algorithm", "beta"), [("fedquad", 0.3), ("tripletfl", 2.5)])
def test_tuplet_loss_weighs_the_hinges_by_beta(algorithm, beta):
    model = _model()
    y = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    ctx = _ctx(y, model)
    algo = clients.build({"algorithm": algorithm, "beta": beta})
    plan = algo.plan(ctx)
    idx = plan.batches[0]  # role by role: [a..., p..., n1..., (n2...)]
    x, yb = ctx.data.x_train[idx], y[idx]
    got = algo.loss(Batch(model, x, yb, ctx, None, plan.arity))
    h = model.embedding(x)
    ce = torch.nn.functional.cross_entropy(model.head(h), yb)
    z = torch.nn.functional.normalize(h, dim=1).view(algo.arity, -1, h.shape[1])
    if algorithm == "fedquad":
        hinge = quadruplet_loss(*z, 1.0, 0.5)
    else:
        hinge = triplet_loss(*z, 1.0)
    assert float(hinge.detach()) > 0
    torch.testing.assert_close(got, ce + beta * hinge)

