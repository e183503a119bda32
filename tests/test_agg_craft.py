"""CRAFT (docs/methods/craft.md) on plain tensors through fedcore.core.aggregators.build."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest
import torch
from torch import nn

from fedcore.core.aggregators import build
from fedcore.core.aggregators.craft import min_norm_solve
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import UpdateBatch


def layout_of(*sizes: int) -> ParamLayout:
    """A layout with explicit layer groups of the given sizes."""
    stops = np.cumsum(sizes).tolist()
    starts = [0, *stops[:-1]]
    groups = tuple(zip(starts, stops, strict=True))
    return ParamLayout((), groups, tuple(f"l{i}" for i in range(len(sizes))))


def batch(pseudo_grads: torch.Tensor, n=None, layout=None, round: int = 0) -> UpdateBatch:
    """An UpdateBatch from pseudo-gradients g_k (deltas are -g_k)."""
    m = pseudo_grads.shape[0]
    n = torch.ones(m) if n is None else torch.as_tensor(n, dtype=pseudo_grads.dtype)
    return UpdateBatch(deltas=-pseudo_grads, num_samples=n, layout=layout, round=round)


def craft(**hp):
    return build({"rule": "craft", "server_lr": 1.0, **hp})


def numpy_craft_layer(g: np.ndarray, rho: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Independent float64 reference of docs/methods/craft.md for one layer (no zero rows)."""
    u = g / np.linalg.norm(g, axis=1, keepdims=True)
    rho = rho / rho.sum()
    return ref + np.linalg.pinv(u) @ (rho - u @ ref)


def test_unit_test_vector_reference_from_previous_round():
    # unit-test vector: reference (0,0,1) set by a single-client round with aggregate (0,0,3).
    agg = craft()
    step0 = agg.aggregate(batch(torch.tensor([[0.0, 0.0, 3.0]], dtype=torch.float64))).step
    assert torch.equal(step0, torch.tensor([0.0, 0.0, -3.0], dtype=torch.float64))
    g = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0]], dtype=torch.float64)
    step = agg.aggregate(batch(g, n=[7, 7])).step
    expected = torch.tensor([0.5, 0.5 + 1 / math.sqrt(2), 1.0], dtype=torch.float64)
    torch.testing.assert_close(-step, expected)
    assert abs(0.5 + 1 / math.sqrt(2) - 1.2071) < 1e-4
    u = g / g.norm(dim=1, keepdim=True)
    torch.testing.assert_close(u @ -step, torch.tensor([0.5, 0.5], dtype=torch.float64))
    # the un-normalised aggregate is the new state
    torch.testing.assert_close(agg.state_dict()["g_prev"], expected)


def test_unit_test_vector_reference_from_load_state_dict():
    agg = craft(server_lr=0.1)
    agg.load_state_dict({"g_prev": torch.tensor([0.0, 0.0, 0.25])})
    step = agg.aggregate(batch(torch.tensor([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0]]))).step
    torch.testing.assert_close(step, -0.1 * torch.tensor([0.5, 1.2071068, 1.0]))


def test_first_round_is_min_norm_solution():
    # round 0 has reference 0, so g = pinv(U) rho.
    g = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0]], dtype=torch.float64)
    step = craft().aggregate(batch(g)).step
    torch.testing.assert_close(-step, torch.tensor([0.5, 0.5 + 1 / math.sqrt(2), 0.0]).double())


@pytest.mark.parametrize("with_reference", [False, True])
def test_constraints_hold_per_layer_for_full_row_rank(with_reference):
    torch.manual_seed(0)
    sizes, m = (7, 30, 12, 5), 5
    layout = layout_of(*sizes)
    n = torch.tensor([10.0, 3.0, 50.0, 7.0, 1.0])
    agg = craft()
    if with_reference:
        agg.load_state_dict({"g_prev": torch.randn(sum(sizes))})
    g = torch.randn(m, sum(sizes)) * torch.tensor([0.01, 1.0, 30.0, 0.5, 2.0])[:, None]
    res = agg.aggregate(batch(g, n=n, layout=layout))
    out = -res.step
    rho = n / n.sum()
    for a, b in layout.groups:
        u = g[:, a:b] / g[:, a:b].norm(dim=1, keepdim=True)
        torch.testing.assert_close(u @ out[a:b], rho, atol=1e-5, rtol=1e-5)
    assert res.metrics["craft/conflict_after"] == 0.0
    assert set(res.metrics) >= {"craft/conflict_before", "craft/conflict_after"}


def test_matches_independent_numpy_reference_with_layers_and_reference():
    torch.manual_seed(1)
    sizes, m = (6, 20, 4), 4  # the last group has d_q = 4 = m
    layout = layout_of(*sizes)
    g = torch.randn(m, sum(sizes), dtype=torch.float64)
    prev = torch.randn(sum(sizes), dtype=torch.float64)
    n = np.array([1.0, 2.0, 3.0, 4.0])
    agg = craft(server_lr=0.3)
    agg.load_state_dict({"g_prev": prev})
    step = agg.aggregate(batch(g, n=n, layout=layout)).step.numpy()
    for a, b in layout.groups:
        ref = prev[a:b].numpy() / np.linalg.norm(prev[a:b].numpy())
        np.testing.assert_allclose(
            step[a:b], -0.3 * numpy_craft_layer(g[:, a:b].numpy(), n, ref), atol=1e-10
        )


def test_no_correction_when_reference_already_satisfies_constraints():
    # u_k = rho_k ref + sqrt(1 - rho_k^2) w_k with w_k orthonormal and orthogonal to ref.
    torch.manual_seed(2)
    d, m = 12, 4
    q, _ = torch.linalg.qr(torch.randn(d, m + 1, dtype=torch.float64))
    ref, w = q[:, 0], q[:, 1:].T
    n = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    rho = n / n.sum()
    u = rho[:, None] * ref + (1 - rho**2).sqrt()[:, None] * w
    g = u * torch.tensor([0.5, 2.0, 7.0, 0.1], dtype=torch.float64)[:, None]
    agg = craft(server_lr=0.7)
    agg.load_state_dict({"g_prev": 5.0 * ref})  # normalised when used
    step = agg.aggregate(batch(g, n=n)).step
    torch.testing.assert_close(step, -0.7 * ref)


def test_single_client_returns_raw_pseudo_gradient():
    # m = 1 -> the raw client update in every layer, not normalised.
    torch.manual_seed(3)
    g = torch.randn(1, 15) * 40.0
    agg = build({"rule": "craft"})  # default server_lr 0.1
    agg.load_state_dict({"g_prev": torch.randn(15)})  # the reference plays no role
    step = agg.aggregate(batch(g, layout=layout_of(5, 10))).step
    torch.testing.assert_close(step, -0.1 * g[0])


def test_all_zero_layer_gives_zero_and_other_layers_unaffected():
    torch.manual_seed(4)
    layout = layout_of(6, 4, 8)
    g = torch.randn(3, 18, dtype=torch.float64)
    g[:, 6:10] = 0.0
    step = craft().aggregate(batch(g, layout=layout)).step
    assert torch.equal(step[6:10], torch.zeros(4, dtype=torch.float64))
    alone = craft().aggregate(batch(g[:, :6], layout=layout_of(6))).step
    torch.testing.assert_close(step[:6], alone)
    assert step[10:].norm() > 0


def test_layer_with_one_nonzero_client_returns_its_raw_update():
    torch.manual_seed(5)
    layout = layout_of(5, 6)
    g = torch.randn(3, 11, dtype=torch.float64)
    g[[0, 2], 5:] = 0.0
    step = craft(server_lr=0.5).aggregate(batch(g, layout=layout)).step
    torch.testing.assert_close(step[5:], -0.5 * g[1, 5:])


def test_zero_rows_are_dropped_and_rho_renormalised_over_the_rest():
    torch.manual_seed(6)
    g = torch.randn(4, 9, dtype=torch.float64)
    g[2] = 0.0
    n = [1.0, 2.0, 5.0, 4.0]
    step = craft().aggregate(batch(g, n=n)).step
    keep = [0, 1, 3]
    expected = numpy_craft_layer(g[keep].numpy(), np.array(n)[keep], np.zeros(9))
    np.testing.assert_allclose(-step.numpy(), expected, atol=1e-12)


def test_uniform_rho_when_all_sample_counts_are_zero():
    g = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    step = craft().aggregate(batch(g, n=[0.0, 0.0])).step
    torch.testing.assert_close(-step, torch.tensor([0.5, 0.5], dtype=torch.float64))


@pytest.mark.parametrize("case", ["duplicates", "d_less_than_m", "anti_parallel"])
@pytest.mark.parametrize("solver", ["auto", "pinv"])
def test_rank_deficient_equals_numpy_pinv(case, solver):
    # least-squares / pinv answer, no crash.
    torch.manual_seed(7)
    ref = torch.randn(5, dtype=torch.float64)
    if case == "duplicates":
        g = torch.randn(4, 5, dtype=torch.float64)
        g[3] = 2.5 * g[1]  # the same direction twice
    elif case == "d_less_than_m":
        g = torch.randn(6, 5, dtype=torch.float64)
    else:
        g = torch.randn(3, 5, dtype=torch.float64)
        g[2] = -3.0 * g[0]
    n = np.arange(1.0, g.shape[0] + 1)
    agg = craft(solver=solver)
    agg.load_state_dict({"g_prev": ref})
    step = agg.aggregate(batch(g, n=n)).step
    expected = numpy_craft_layer(g.numpy(), n, (ref / ref.norm()).numpy())
    np.testing.assert_allclose(-step.numpy(), expected, atol=1e-9)
    assert torch.isfinite(step).all()


def test_rank_deficient_float32_duplicate_clients():
    torch.manual_seed(7)
    g = torch.randn(4, 50)
    g[3] = g[1]  # two clients with identical updates
    ref = torch.randn(50)
    n = np.array([1.0, 2.0, 3.0, 4.0])
    agg = craft()
    agg.load_state_dict({"g_prev": ref})
    step = agg.aggregate(batch(g, n=n)).step
    expected = numpy_craft_layer(g.double().numpy(), n, (ref / ref.norm()).double().numpy())
    np.testing.assert_allclose(-step.numpy(), expected, atol=1e-5)
    # the duplicated pair is fitted in the least-squares sense: u_1 . g = (rho_1 + rho_3) / 2
    u = g / g.norm(dim=1, keepdim=True)
    assert float(u[1] @ -step) == pytest.approx((2.0 + 4.0) / 2 / 10.0, abs=1e-5)


def test_full_column_rank_ignores_the_reference():
    # d_q < m with full column rank -> g = pinv(U) rho, whatever the reference.
    torch.manual_seed(8)
    g = torch.randn(6, 3, dtype=torch.float64)
    with_ref = craft()
    with_ref.load_state_dict({"g_prev": torch.randn(3, dtype=torch.float64)})
    torch.testing.assert_close(with_ref.aggregate(batch(g)).step, craft().aggregate(batch(g)).step)


def _float32_case(m: int, d: int, rank: str) -> torch.Tensor:
    u = torch.randn(m, d)
    if rank == "duplicate_rows":
        u[m - 1] = u[0]
    elif rank == "low_support":  # every row lives on the first two coordinates: rank 2
        u[:, 2:] = 0.0
    elif rank == "zero_row":
        u[1] = 0.0
    norms = u.norm(dim=1, keepdim=True)
    return torch.where(norms > 0, u / norms, u)


@pytest.mark.parametrize("shape", [(3, 7), (8, 8), (5, 200), (2, 2000)])
@pytest.mark.parametrize("rank", ["full", "duplicate_rows", "low_support", "zero_row"])
def test_gram_solver_equals_pinv_float32(shape, rank, monkeypatch):
    torch.manual_seed(9)
    u = _float32_case(*shape, rank)
    v = torch.rand(shape[0])
    pinv = torch.linalg.pinv
    with monkeypatch.context() as mp:  # the Gram path must not fall back to pinv here
        mp.setattr(torch.linalg, "pinv", lambda *a, **k: pytest.fail("fell back to pinv"))
        out = min_norm_solve(u, v)
    assert out.dtype == torch.float32
    # exact pinv of the stored float32 matrix, with torch's float32 default tolerance
    rtol = torch.finfo(torch.float32).eps * max(shape)
    exact = pinv(u.double(), rtol=rtol) @ v.double()
    torch.testing.assert_close(out.double(), exact, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out, pinv(u) @ v, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(
        out.numpy(), np.linalg.pinv(u.double().numpy(), rcond=rtol) @ v.double().numpy(), atol=1e-6
    )


@pytest.mark.parametrize("shape", [(3, 7), (8, 8), (9, 4)])
@pytest.mark.parametrize("rank", ["full", "deficient"])
def test_float64_and_wide_cases_fall_back_to_torch_pinv(shape, rank):
    # The float64 Gram cannot resolve float64's tolerance, and d < m is cheaper as a pinv.
    torch.manual_seed(9)
    m, d = shape
    u = torch.randn(m, d, dtype=torch.float64)
    if rank == "deficient":
        u = torch.randn(m, 2, dtype=torch.float64) @ torch.randn(2, d, dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)
    v = torch.rand(m, dtype=torch.float64)
    assert torch.equal(min_norm_solve(u, v), torch.linalg.pinv(u) @ v)


def test_gram_solver_float32_large_group_is_more_accurate_than_float32_pinv():
    torch.manual_seed(10)
    u = torch.randn(20, 5000)
    u = u / u.norm(dim=1, keepdim=True)
    v = torch.rand(20)
    exact = torch.linalg.pinv(u.double()) @ v.double()
    err = (min_norm_solve(u, v).double() - exact).norm() / exact.norm()
    err_pinv32 = (min_norm_solve(u, v, solver="pinv").double() - exact).norm() / exact.norm()
    assert err < 1e-6 and err <= err_pinv32


def test_granularity_model_equals_one_group_layout():
    torch.manual_seed(11)
    layout = layout_of(4, 9, 3)
    one_group = layout_of(16)
    model_wise, single = craft(granularity="model"), craft()
    n = [3.0, 1.0, 2.0]
    for t in range(3):
        g = torch.randn(3, 16, dtype=torch.float64)
        a = model_wise.aggregate(batch(g, n=n, layout=layout, round=t)).step
        b = single.aggregate(batch(g, n=n, layout=one_group, round=t)).step
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    layer_wise = craft().aggregate(batch(g, n=n, layout=layout)).step
    assert not torch.allclose(layer_wise, craft(granularity="model").aggregate(batch(g, n=n)).step)


def test_state_dict_round_trip_reproduces_next_round_bit_for_bit():
    torch.manual_seed(12)
    layout = layout_of(10, 20, 6)
    rounds = [torch.randn(5, 36) for _ in range(3)]
    a = craft(server_lr=0.1)
    for g in rounds[:2]:
        a.aggregate(batch(g, n=[1, 2, 3, 4, 5], layout=layout))
    b = craft(server_lr=0.1)
    b.load_state_dict(a.state_dict())
    sa = a.aggregate(batch(rounds[2], n=[1, 2, 3, 4, 5], layout=layout)).step
    sb = b.aggregate(batch(rounds[2], n=[1, 2, 3, 4, 5], layout=layout)).step
    assert torch.equal(sa, sb)
    assert torch.equal(a.state_dict()["g_prev"], b.state_dict()["g_prev"])
    fresh = craft(server_lr=0.1).aggregate(batch(rounds[2], n=[1, 2, 3, 4, 5], layout=layout)).step
    assert not torch.equal(sa, fresh)  # the state matters


def test_state_dict_initial_and_shape_mismatch():
    agg = craft()
    assert agg.state_dict() == {"g_prev": None}
    agg.load_state_dict({"g_prev": torch.ones(4)})
    with pytest.raises(ValueError, match="g_prev"):
        agg.aggregate(batch(torch.randn(2, 5)))


def test_sign_step_moves_theta_toward_the_clients():
    torch.manual_seed(13)
    theta = torch.randn(20)
    direction = torch.randn(20)
    # clients all moved along +direction (plus small noise): theta_k = theta + c_k direction + e_k
    deltas = torch.tensor([0.5, 1.0, 2.0])[:, None] * direction + 0.01 * torch.randn(3, 20)
    agg = build({"rule": "craft"})
    step = agg.aggregate(UpdateBatch(deltas=deltas, num_samples=torch.ones(3))).step
    assert (deltas @ step > 0).all()
    assert step @ direction > 0
    new = theta + step
    for k in range(3):
        assert (new - (theta + deltas[k])).norm() < deltas[k].norm()


def test_conflict_metrics_hand_example():
    # layer 1: g2 . (g1 + g2)/2 < 0 -> FedAvg conflicts with client 2; layer 2: no conflict.
    g = torch.tensor([[1.0, 0.0, 1.0], [-0.9, 0.1, 1.0]], dtype=torch.float64)
    agg = craft()
    res = agg.aggregate(batch(g, layout=layout_of(2, 1)))
    assert res.metrics["craft/conflict_before"] == pytest.approx(1 / 4)
    assert res.metrics["craft/conflict_after"] == 0.0


def test_layout_from_module_groups_conv_with_its_norm():
    torch.manual_seed(14)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3)
    )
    layout = ParamLayout.from_model(model)
    assert len(layout.groups) == 2  # conv+norm, linear
    d = layout.dim
    g = torch.randn(4, d, dtype=torch.float64)
    n = torch.tensor([2.0, 2.0, 1.0, 5.0], dtype=torch.float64)
    out = -craft().aggregate(batch(g, n=n, layout=layout)).step
    for a, b in layout.groups:
        u = g[:, a:b] / g[:, a:b].norm(dim=1, keepdim=True)
        torch.testing.assert_close(u @ out[a:b], n / n.sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keeps_dtype_and_device(dtype):
    g = torch.randn(3, 10, dtype=dtype)
    step = craft().aggregate(batch(g, layout=layout_of(4, 6))).step
    assert step.dtype == dtype and step.device == g.device and step.shape == (10,)


def test_groups_must_tile_the_vector():
    with pytest.raises(ValueError, match="tile"):
        craft().aggregate(batch(torch.randn(2, 10), layout=layout_of(4, 5)))


@pytest.mark.parametrize(
    "bad", [{"granularity": "neuron"}, {"server_lr": 0.0}, {"pinv_rtol": -1.0}, {"lr": 1.0}]
)
def test_bad_hparams_rejected(bad):
    with pytest.raises(pydantic.ValidationError):
        build({"rule": "craft", **bad})
