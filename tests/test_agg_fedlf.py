"""FedLF (docs/methods/fedlf.md, zibinpan/FedLF @7b6e0b7): the simplex QP, h, layers, state."""

import io
import math

import pytest
import torch

from fedcore.core import aggregators
from fedcore.core.aggregators import fedlf
from fedcore.core.aggregators._min_norm import min_norm_weights
from fedcore.core.aggregators.fedlf import fairness_vector
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import UpdateBatch


def _batch(g, losses, ids=None, round=1, groups=None):
    """A batch whose pseudo-gradients are ``g`` (deltas = -g)."""
    g = torch.as_tensor(g, dtype=torch.float64)
    layout = None if groups is None else ParamLayout((), tuple(groups))
    return UpdateBatch(
        -g,
        torch.ones(g.shape[0]),
        layout=layout,
        stats={"loss_before": torch.as_tensor(losses, dtype=torch.float32)},
        client_ids=None if ids is None else torch.tensor(ids),
        round=round,
    )


def _rand(seed, m, d, shift=0.0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, d, generator=gen, dtype=torch.float64) + shift


# --- the min-norm QP -------------------------------------------------------------------------


def test_qp_two_vectors_matches_closed_form():
    cases = [_rand(s, 2, 4) for s in range(6)]
    cases += [torch.tensor([[1.0, 0.0], [3.0, 0.0]], dtype=torch.float64)]  # clipped: lambda_1 = 1
    cases += [torch.tensor([[2.0, 1.0], [0.5, 0.2]], dtype=torch.float64)]  # clipped: lambda_1 = 0
    for G in cases:
        g1, g2 = G
        lam1 = float(((g2 - g1) @ g2) / (g1 - g2).norm() ** 2)
        lam1 = min(max(lam1, 0.0), 1.0)
        lam, optimal = min_norm_weights(G @ G.T)
        assert optimal
        torch.testing.assert_close(
            lam, torch.tensor([lam1, 1 - lam1], dtype=torch.float64), atol=1e-7, rtol=0
        )


def test_qp_kkt_conditions_on_random_instances():
    for seed, (m, d) in enumerate([(8, 5), (8, 50), (12, 200), (5, 3)]):
        G = _rand(seed, m, d, shift=0.3 * (seed % 2))
        P = G @ G.T
        lam, optimal = min_norm_weights(P)
        assert optimal and lam.dtype == torch.float64
        # implementation check: min_norm_weights clamps and renormalises, so these hold by
        # construction; the KKT conditions below are what can fail
        assert (lam >= 0).all()
        assert abs(float(lam.sum()) - 1) < 1e-12
        # gradient condition: (P lam)_i >= lam^T P lam, with equality where lam_i > 0
        grad, f = P @ lam, lam @ P @ lam
        scale = float(P.diagonal().mean())
        assert (grad - f >= -1e-8 * scale).all()
        assert (lam * (grad - f)).abs().max() <= 1e-8 * scale
        # the min-norm point has a non-negative dot with every row: g_i . d >= ||d||^2
        dvec = lam @ G
        assert (G @ dvec >= dvec @ dvec - 1e-8 * scale).all()
        # and no feasible vertex or the uniform point is shorter
        assert f <= P.diagonal().min() + 1e-12 and f <= P.mean() + 1e-12


def test_qp_degenerate_inputs():
    lam, _ = min_norm_weights(torch.ones(1, 1, dtype=torch.float64))
    assert lam.tolist() == [1.0]
    G = torch.tensor([[1.0, 2.0]] * 3, dtype=torch.float64)  # identical rows: any lambda
    lam, _ = min_norm_weights(G @ G.T)
    # any lambda, but the point is the row itself (lambda >= 0, sum 1: by construction)
    torch.testing.assert_close(lam @ G, G[0], rtol=0, atol=1e-9)
    G = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])  # 0 is in the hull
    lam, _ = min_norm_weights(G @ G.T)
    assert float((lam.float() @ G).norm()) < 1e-6


# --- the fairness vector ---------------------------------------------------------------------


def test_fairness_vector_by_hand():
    # l = (3, 4): l.pi = 7/sqrt2, ||l|| = 5 -> h = (7/sqrt2)(3, 4)/125 - (1, 1)/(5 sqrt2)
    h = fairness_vector(torch.tensor([3.0, 4.0]))
    expected = torch.tensor([-4.0, 3.0], dtype=torch.float64) / (125 * math.sqrt(2))
    torch.testing.assert_close(h, expected)
    # h is orthogonal to l and points away from pi (the higher-loss client gets the + weight)
    l = torch.rand(7, dtype=torch.float64) + 0.1
    h = fairness_vector(l)
    assert abs(float(h @ l)) < 1e-12 and float(h.sum()) < 0


def test_fairness_vector_is_zero_when_losses_are_equal():
    # l = c 1: (l.pi) l/||l||^3 = c sqrt(m) c 1/(c^3 m^1.5) = 1/(c m) = pi/||l||, so h = 0
    for c, m in ((2.3, 10), (0.1, 3), (1.0, 1)):
        h = fairness_vector(torch.full((m,), c))
        assert torch.equal(h, torch.zeros(m, dtype=torch.float64))
    assert torch.equal(fairness_vector(torch.zeros(3)), torch.zeros(3, dtype=torch.float64))


# --- the rule ----------------------------------------------------------------------------------


def test_equal_losses_and_equal_orthogonal_gradients_give_the_mean():
    # h = 0 -> no fair row; two orthogonal rows of equal norm: the min-norm point is their mean
    g = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    agg = aggregators.build({"rule": "fedlf"})
    step = agg.aggregate(_batch(g, [0.7, 0.7])).step
    torch.testing.assert_close(step, -g.mean(dim=0), atol=1e-9, rtol=0)
    # unequal losses add the fair row h.G = (-g_0 + g_1)/.. (normalised): the step leans to g_1
    step = aggregators.build({"rule": "fedlf"}).aggregate(_batch(g, [0.2, 1.5])).step
    assert -step[1] > -step[0] > -1e-9
    assert abs(float(step.norm()) - float(g.mean(0).norm())) < 1e-9


def test_step_moves_toward_clients_when_they_agree():
    g = _rand(0, 6, 20, shift=1.0)  # pairwise agreeing clients
    batch = _batch(g, torch.rand(6) + 0.5, groups=[(0, 8), (8, 20)])
    agg = aggregators.build({"rule": "fedlf"})
    res = agg.aggregate(batch)
    step = res.step
    assert (batch.deltas @ step > 0).all()  # the step moves along every client's delta
    torch.testing.assert_close(step.norm(), g.mean(dim=0).norm())
    assert res.metrics["fedlf/fallback"] == 0.0


def test_no_client_conflicts_with_the_direction():
    for seed in range(4):
        g = _rand(seed, 10, 30)  # conflicting clients
        batch = _batch(g, torch.rand(10) + 0.5, groups=[(0, 10), (10, 25), (25, 30)])
        step = aggregators.build({"rule": "fedlf"}).aggregate(batch).step
        assert (batch.deltas @ step >= -1e-6).all()
        # per layer too: each d^q is the min-norm point of (positively rescaled) client rows
        for a, b in [(0, 10), (10, 25), (25, 30)]:
            assert (batch.deltas[:, a:b] @ step[a:b] >= -1e-8).all()


def test_layers_are_solved_independently_and_clients_rescaled():
    g = _rand(1, 5, 12)
    losses = torch.rand(5, generator=torch.Generator().manual_seed(1)) + 0.5  # not the global RNG
    groups = [(0, 6), (6, 12)]
    base = aggregators.build({"rule": "fedlf"}).aggregate(_batch(g, losses, groups=groups)).step
    # scaling layer 2 of every client leaves layer 1's direction unchanged
    g2 = g.clone()
    g2[:, 6:] *= 100.0
    other = aggregators.build({"rule": "fedlf"}).aggregate(_batch(g2, losses, groups=groups)).step
    cos = torch.nn.functional.cosine_similarity(base[:6], other[:6], dim=0)
    assert float(cos) > 1 - 1e-9
    # with the whole model as one group it does change
    whole = aggregators.build({"rule": "fedlf"}).aggregate(_batch(g, losses)).step
    whole2 = aggregators.build({"rule": "fedlf"}).aggregate(_batch(g2, losses)).step
    assert float(torch.nn.functional.cosine_similarity(whole[:6], whole2[:6], dim=0)) < 0.99
    # each client's layer gradient is rescaled to the mean norm: scaling one client is invisible
    g3 = g.clone()
    g3[2] *= 10.0
    agg = aggregators.build({"rule": "fedlf"})
    one = agg.aggregate(_batch(g3, losses)).step
    cos = torch.nn.functional.cosine_similarity(one, whole, dim=0)
    assert float(cos) > 1 - 1e-9


def test_history_of_recently_offline_clients():
    agg = aggregators.build({"rule": "fedlf"})
    agg.aggregate(_batch([[0.0, 1.0], [0.1, 1.0]], [1.0, 1.0], ids=[0, 1], round=1))
    res = agg.aggregate(_batch([[1.0, 0.2], [1.0, 0.3]], [1.0, 1.0], ids=[2, 3], round=2))
    assert res.metrics["fedlf/history_rows"] == 0.0  # #seen = 2 = m: no one offline yet
    current = torch.tensor([[1.0, -1.0], [1.0, -0.8]], dtype=torch.float64)
    batch = _batch(current, [1.0, 1.0], ids=[0, 4], round=3)
    res = agg.aggregate(batch)
    step = res.step
    # #seen = 4 > m = 2: tau = 2; clients 1 (round 1), 2 and 3 (round 2) are offline and recent
    assert res.metrics["fedlf/history_rows"] == 3.0
    hist_g1 = torch.tensor([0.1, 1.0], dtype=torch.float64)
    without = aggregators.build({"rule": "fedlf"}).aggregate(_batch(current, [1.0, 1.0])).step
    assert float(-without @ hist_g1) < 0  # on its own, the round conflicts with client 1
    assert float(-step @ hist_g1) >= -1e-9  # the history row removes that conflict
    assert (batch.deltas @ step >= -1e-9).all()


def test_history_window_tau():
    agg = aggregators.build({"rule": "fedlf"})
    g = torch.tensor([[1.0, 0.0], [1.0, 0.1]], dtype=torch.float64)
    agg.aggregate(_batch(g, [1.0, 1.0], ids=[0, 1], round=1))
    agg.aggregate(_batch(g, [1.0, 1.0], ids=[2, 3], round=2))
    # round 4, #seen = 4, m = 2 -> tau = 2: clients seen at round 1 are too old, round 2 is not
    res = agg.aggregate(_batch(g, [1.0, 1.0], ids=[4, 5], round=4))
    assert res.metrics["fedlf/history_rows"] == 2.0


def test_step5_fallback_and_halving(monkeypatch):
    # rows (1, 0), (-1, 0), (1, 0), equal losses (no fair row): force lambda = (0.45, 0.55, 0)
    g = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    forced = torch.tensor([0.45, 0.55, 0.0], dtype=torch.float64)
    monkeypatch.setattr(fedlf, "min_norm_weights", lambda gram: (forced, True))
    # d_QP = (-0.1, 0); rescaled d = (-1/3, 0) conflicts with g_0; ||d|| > 2||d_QP|| -> halve
    # to (-1/6, 0); still conflicting and ||d|| <= 0.2 -> fall back to d_QP
    agg = aggregators.build({"rule": "fedlf"})
    res = agg.aggregate(_batch(g, [1.0, 1.0, 1.0]))
    step = res.step
    torch.testing.assert_close(step, torch.tensor([0.1, 0.0], dtype=torch.float64))
    assert res.metrics["fedlf/halvings"] == 1.0 and res.metrics["fedlf/fallback"] == 1.0
    # with tol 0.2 the halved d (conflict 1/6) is accepted: halving changes the outcome
    agg = aggregators.build({"rule": "fedlf", "conflict_tol": 0.2})
    res = agg.aggregate(_batch(g, [1.0, 1.0, 1.0]))
    step = res.step
    torch.testing.assert_close(step, torch.tensor([1 / 6, 0.0], dtype=torch.float64))
    assert res.metrics["fedlf/fallback"] == 0.0


def test_step5_tolerance_is_in_the_codes_gradient_units(monkeypatch):
    """The code tests -(g.d) > 1e-6 on g = delta / eta; deltas are eta times that, so the
    tolerance is 1e-6 eta^2. The rows of test_step5_fallback_and_halving scaled by 1e-3: the
    rescaled d conflicts by 3.3e-7 in delta units, 3.3e-3 in gradient units at eta = 0.01:
    the code halves, then falls back to d_QP; the old delta-unit test accepted d."""
    g = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]], dtype=torch.float64) * 1e-3
    forced = torch.tensor([0.45, 0.55, 0.0], dtype=torch.float64)
    monkeypatch.setattr(fedlf, "min_norm_weights", lambda gram: (forced, True))
    b = _batch(g, [1.0, 1.0, 1.0])
    b.stats["local_lr"] = torch.full((3,), 0.01)
    res = aggregators.build({"rule": "fedlf"}).aggregate(b)
    assert res.metrics["fedlf/halvings"] == 1.0 and res.metrics["fedlf/fallback"] == 1.0
    torch.testing.assert_close(res.step, torch.tensor([1e-4, 0.0], dtype=torch.float64))
    del b.stats["local_lr"]  # taken as gradients (eta = 1): 3.3e-7 is within 1e-6
    assert aggregators.build({"rule": "fedlf"}).aggregate(b).metrics["fedlf/fallback"] == 0.0


def test_zero_rows_and_single_client():
    # a client with a zero gradient is left out of the QP instead of producing NaN
    g = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    step = aggregators.build({"rule": "fedlf"}).aggregate(_batch(g, [1.0, 2.0, 3.0])).step
    assert torch.isfinite(step).all() and float(step.norm()) > 0
    # one client, one round: the step is its own delta
    one = torch.tensor([[0.3, -0.4, 1.0]], dtype=torch.float64)
    step = aggregators.build({"rule": "fedlf"}).aggregate(_batch(one, [0.9])).step
    torch.testing.assert_close(step, -one[0])
    # all-zero updates: zero step
    zero = aggregators.build({"rule": "fedlf"}).aggregate(
        _batch(torch.zeros(3, 4), [1.0, 2.0, 3.0])
    ).step
    assert torch.equal(zero, torch.zeros(4, dtype=torch.float64))


def test_state_round_trip():
    agg = aggregators.build({"rule": "fedlf"})
    for r in range(1, 4):
        agg.aggregate(
            _batch(_rand(r, 3, 8), torch.rand(3) + 0.5, ids=[2 * r, 2 * r + 1, 50 + r], round=r)
        )
    state = agg.state_dict()
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    fresh = aggregators.build({"rule": "fedlf"})
    fresh.load_state_dict(torch.load(buf))
    batch = _batch(_rand(9, 3, 8), torch.rand(3) + 0.5, ids=[2, 50, 60], round=4)
    res = agg.aggregate(batch)
    first = res.step
    assert res.metrics["fedlf/history_rows"] > 0
    res_fresh = fresh.aggregate(batch)
    torch.testing.assert_close(res_fresh.step, first)
    assert res_fresh.metrics == res.metrics
    assert not torch.allclose(aggregators.build({"rule": "fedlf"}).aggregate(batch).step, first)


def test_dtype_server_lr_needs_and_bad_hparams():
    g = _rand(2, 6, 9)
    batch = UpdateBatch(-g.float(), torch.ones(6), stats={"loss_before": torch.rand(6) + 0.5})
    step = aggregators.build({"rule": "fedlf"}).aggregate(batch).step
    assert step.dtype == torch.float32 and torch.isfinite(step).all()
    half = aggregators.build({"rule": "fedlf", "server_lr": 0.5}).aggregate(batch).step
    torch.testing.assert_close(half, 0.5 * step)
    assert aggregators.build({"rule": "fedlf"}).needs == {"loss_before", "local_lr"}
    with pytest.raises(ValueError, match="server_lr"):
        aggregators.build({"rule": "fedlf", "server_lr": 0.0})
    with pytest.raises(ValueError, match="conflict_tol"):
        aggregators.build({"rule": "fedlf", "conflict_tol": -1.0})
