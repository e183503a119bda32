"""FedFV against docs/methods/fedfv.md (official easyFL fedfv.py): hand cases, invariants, state."""

import io
import math

import pytest
import torch

from fedcore.core import aggregators
from fedcore.core.aggregators.fedfv import project_internal
from fedcore.core.records.aggregate import UpdateBatch


def _batch(g, losses, ids=None, round=1):
    """A batch whose pseudo-gradients are ``g`` (deltas = -g)."""
    g = torch.as_tensor(g, dtype=torch.float64)
    return UpdateBatch(
        -g,
        torch.ones(g.shape[0]),
        stats={"loss_before": torch.as_tensor(losses, dtype=torch.float32)},
        client_ids=None if ids is None else torch.tensor(ids),
        round=round,
    )


def _reference_internal(g, losses, alpha):
    """Literal transcription of the official loop on vectors, for comparison."""
    m = g.shape[0]
    order = sorted(range(m), key=lambda i: float(losses[i]))
    keep = order[math.ceil((m - 1) * (1 - alpha)) :] if alpha > 0 else []
    out = [g[i].clone() for i in range(m)]
    for i in range(m):
        if i in keep:
            continue
        for j in order:
            if j != i:
                dot = g[j] @ out[i]
                if dot < 0:
                    out[i] = out[i] - g[j] * dot / g[j].norm() ** 2
    return torch.stack(out)


def _conflicting(seed, m=10, d=6):
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(m, d, generator=gen, dtype=torch.float64)
    losses = torch.rand(m, generator=gen, dtype=torch.float64) + 0.5
    return g, losses


def test_two_conflicting_clients_by_hand():
    g = torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    losses = torch.tensor([0.1, 0.5])  # client 1 has the highest loss -> kept
    proj, n = project_internal(g, losses, alpha=0.1)
    # g'_0 = g_0 - (g_1.g_0 / ||g_1||^2) g_1 = (1, 0) + 0.5 (-1, 1)
    torch.testing.assert_close(proj, torch.tensor([[0.5, 0.5], [-1.0, 1.0]], dtype=torch.float64))
    assert n == 1
    assert proj[0] @ g[1] >= -1e-12  # the conflict is removed
    # through the rule, without external conflicts: mean of g', rescaled to ||mean g|| = 0.5
    agg = aggregators.build({"rule": "fedfv", "tau": 0})
    res = agg.aggregate(_batch(g, losses))
    step = res.step
    g_hat = torch.tensor([-0.25, 0.75], dtype=torch.float64)
    torch.testing.assert_close(step, -g_hat / g_hat.norm() * 0.5)
    assert res.metrics["fedfv/internal_projections"] == 1.0


def test_internal_projection_matches_the_literal_official_loop():
    for seed in range(5):
        g, losses = _conflicting(seed)
        for alpha in (0.0, 0.1, 0.35, 1.0):
            proj, _ = project_internal(g, losses, alpha)
            torch.testing.assert_close(proj, _reference_internal(g, losses, alpha))


def test_projection_order_is_ascending_loss():
    # g_0 conflicts with both g_1 and g_2; the result depends on which it is projected off first
    g = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 2.0, 0.0], [-1.0, 0.0, 1.0]], dtype=torch.float64)
    a, _ = project_internal(g, torch.tensor([0.0, 1.0, 2.0]), alpha=0.0)
    b, _ = project_internal(g, torch.tensor([0.0, 2.0, 1.0]), alpha=0.0)
    assert not torch.allclose(a[0], b[0])
    # losses 0 < 1 < 2: off g_1 -> (0.8, 0.4, 0), then off g_2 -> (0.4, 0.4, 0.4)
    torch.testing.assert_close(a[0], torch.tensor([0.4, 0.4, 0.4], dtype=torch.float64))
    # losses 0 < 2 < 1: off g_2 -> (0.5, 0, 0.5), then off g_1 -> (0.4, 0.2, 0.5)
    torch.testing.assert_close(b[0], torch.tensor([0.4, 0.2, 0.5], dtype=torch.float64))


def test_highest_loss_clients_stay_unprojected():
    g, losses = _conflicting(3)
    for alpha, n_kept in ((0.1, 1), (0.3, 3), (0.0, 0), (1.0, 10)):
        proj, _ = project_internal(g, losses, alpha)
        kept = torch.argsort(losses, descending=True)[:n_kept]
        torch.testing.assert_close(proj[kept], g[kept])
        others = torch.argsort(losses, descending=True)[n_kept:]
        moved = (proj[others] - g[others]).norm(dim=1) > 1e-9
        assert moved.sum() >= len(others) - 1  # random Gaussian rows: nearly all conflict


def test_final_norm_equals_norm_of_plain_mean():
    for seed in range(4):
        g, losses = _conflicting(seed)
        agg = aggregators.build({"rule": "fedfv", "tau": 1})
        res = agg.aggregate(_batch(g, losses))
        step = res.step
        torch.testing.assert_close(step.norm(), g.mean(dim=0).norm())
        assert res.metrics["fedfv/internal_projections"] > 0


def test_no_conflict_gives_the_plain_mean():
    gen = torch.Generator().manual_seed(0)
    g = torch.rand(6, 5, generator=gen, dtype=torch.float64) + 0.1  # pairwise dots > 0
    agg = aggregators.build({"rule": "fedfv", "tau": 1})
    res = agg.aggregate(_batch(g, torch.rand(6, generator=gen)))
    step = res.step
    torch.testing.assert_close(step, -g.mean(dim=0))
    assert res.metrics["fedfv/internal_projections"] == 0.0
    assert res.metrics["fedfv/external_projections"] == 0.0


def test_external_projection_tau1_uses_current_round_history():
    # same clients as the hand case: internal mean g_hat = (-0.25, 0.75) conflicts with g_0
    g = torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    losses = torch.tensor([0.1, 0.5])
    agg = aggregators.build({"rule": "fedfv", "tau": 1})
    res = agg.aggregate(_batch(g, losses, round=1))
    step = res.step
    # G = g_0 (the only conflicting one): g_hat - (g_hat.G/||G||^2) G = (0, 0.75); norm -> 0.5
    torch.testing.assert_close(step, torch.tensor([0.0, -0.5], dtype=torch.float64))
    assert res.metrics["fedfv/external_projections"] == 1.0
    # while round < tau the external step is skipped (official `current_round >= tau`)
    early = _batch(g, losses, round=0)
    skipped = aggregators.build({"rule": "fedfv", "tau": 1}).aggregate(early).step
    g_hat = torch.tensor([-0.25, 0.75], dtype=torch.float64)
    torch.testing.assert_close(skipped, -g_hat / g_hat.norm() * 0.5)


def test_external_projection_tau2_uses_the_previous_round():
    agg = aggregators.build({"rule": "fedfv", "tau": 2})
    agg.aggregate(_batch([[-1.0, 0.0]], [1.0], ids=[7], round=1))  # client 7 seen in round 1
    g = torch.tensor([[1.0, 0.0], [1.0, 0.2]], dtype=torch.float64)  # no internal conflict
    res = agg.aggregate(_batch(g, [0.3, 0.4], ids=[1, 2], round=2))
    step = res.step
    # h = 1: g_hat = (1, 0.1) conflicts with g_7 = (-1, 0) -> (0, 0.1); h = 0: no conflict left
    torch.testing.assert_close(
        step, torch.tensor([0.0, -1.0], dtype=torch.float64) * g.mean(0).norm()
    )
    assert res.metrics["fedfv/external_projections"] == 1.0
    # a client seen again in round 2 is only in round 2's history, with its new gradient
    agg2 = aggregators.build({"rule": "fedfv", "tau": 2})
    agg2.aggregate(_batch([[-1.0, 0.0]], [1.0], ids=[1], round=1))
    step2 = agg2.aggregate(_batch(g, [0.3, 0.4], ids=[1, 2], round=2)).step
    torch.testing.assert_close(step2, -g.mean(dim=0))


def test_state_round_trip():
    agg = aggregators.build({"rule": "fedfv", "tau": 3, "alpha": 0.2})
    for r in range(1, 4):
        g, losses = _conflicting(r, m=4)
        agg.aggregate(_batch(g, losses, ids=[r, r + 1, 10 + r, 20], round=r))
    state = agg.state_dict()
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    fresh = aggregators.build({"rule": "fedfv", "tau": 3, "alpha": 0.2})
    fresh.load_state_dict(torch.load(buf))
    g, losses = _conflicting(9, m=4)
    batch = _batch(g, losses, ids=[1, 5, 6, 7], round=4)
    res = agg.aggregate(batch)
    first = res.step
    assert res.metrics["fedfv/external_projections"] > 0  # history matters here
    torch.testing.assert_close(fresh.aggregate(batch).step, first)
    # and differs from a rule without that history
    assert not torch.allclose(
        aggregators.build({"rule": "fedfv", "tau": 3, "alpha": 0.2}).aggregate(batch).step, first
    )


def test_dtype_server_lr_needs_and_bad_hparams():
    g, losses = _conflicting(1)
    batch = UpdateBatch(-g.float(), torch.ones(10), stats={"loss_before": losses.float()}, round=1)
    step = aggregators.build({"rule": "fedfv"}).aggregate(batch).step
    assert step.dtype == torch.float32 and torch.isfinite(step).all()
    half = aggregators.build({"rule": "fedfv", "server_lr": 0.5}).aggregate(batch).step
    torch.testing.assert_close(half, 0.5 * step)
    assert aggregators.build({"rule": "fedfv"}).needs == {"loss_before"}
    with pytest.raises(ValueError, match="alpha"):
        aggregators.build({"rule": "fedfv", "alpha": 1.5})
    with pytest.raises(ValueError, match="tau"):
        aggregators.build({"rule": "fedfv", "tau": -1})
