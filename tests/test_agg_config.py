"""ConFIG (docs/methods/config.md) on plain tensors through fedcore.core.aggregators.build."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest
import torch

from fedcore.core.aggregators import build
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import UpdateBatch


def batch(pseudo_grads: torch.Tensor, n=None, layout=None) -> UpdateBatch:
    """An UpdateBatch from pseudo-gradients g_k (deltas are -g_k)."""
    m = pseudo_grads.shape[0]
    n = torch.ones(m) if n is None else torch.as_tensor(n, dtype=pseudo_grads.dtype)
    return UpdateBatch(deltas=-pseudo_grads, num_samples=n, layout=layout)


def config_g(g: torch.Tensor, n=None, **hp) -> torch.Tensor:
    """The ConFIG aggregate g (step = -server_lr g, server_lr = 1)."""
    return -build({"rule": "config", **hp}).aggregate(batch(g, n=n)).step


def numpy_config(g: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Independent float64 ConFIG_update with ProjectionLength."""
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    u = np.divide(g, norms, out=np.zeros_like(g), where=norms > 0)
    direction = np.linalg.pinv(u) @ w
    unit = direction / np.linalg.norm(direction)
    return (g @ unit).sum() * unit


def test_hand_computed_orthogonal_pair():
    # u = I, direction = (1, 1), unit = (1, 1)/sqrt2, length = (1 + 2)/sqrt2 -> g = (1.5, 1.5)
    g = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    torch.testing.assert_close(config_g(g), torch.tensor([1.5, 1.5], dtype=torch.float64))


def test_hand_computed_pair_at_45_degrees():
    # g1 = (1, 0), g2 = (1, 1): the unit direction bisects them (22.5 deg), and
    # length = (1 + sqrt2) cos 22.5 deg, so g = (1 + sqrt2) ((1 + 1/sqrt2)/2, 1/(2 sqrt2)).
    g = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    s2 = math.sqrt(2.0)
    expected = (1 + s2) * torch.tensor([(1 + 1 / s2) / 2, 1 / (2 * s2)], dtype=torch.float64)
    torch.testing.assert_close(config_g(g), expected)
    assert abs(expected[0] - 2.06066) < 1e-5 and abs(expected[1] - 0.853553) < 1e-6


@pytest.mark.parametrize("weights", ["equal", "data"])
def test_positive_dot_with_every_client_for_full_row_rank(weights):
    torch.manual_seed(0)
    for trial in range(5):
        m, d = 3 + trial, 40
        # strongly conflicting clients: a shared part plus large opposite parts
        g = torch.randn(m, d) * torch.rand(m, 1) * 10 + torch.randn(d)
        n = torch.randint(1, 100, (m,)).float()
        agg = build({"rule": "config", "weights": weights, "server_lr": 0.5})
        res = agg.aggregate(batch(g, n=n))
        step = res.step
        assert (g @ -step > 0).all()  # g_k . g > 0 for every client
        assert (batch(g).deltas @ step > 0).all()  # the step moves toward every client
        assert res.metrics["config/conflict_after"] == 0.0


@pytest.mark.parametrize("weights", ["equal", "data"])
def test_matches_independent_numpy_reference(weights):
    torch.manual_seed(1)
    g = torch.randn(6, 30, dtype=torch.float64)
    n = np.array([5.0, 1.0, 9.0, 2.0, 2.0, 7.0])
    w = np.ones(6) if weights == "equal" else n / n.sum()
    out = config_g(g, n=n, weights=weights)
    np.testing.assert_allclose(out.numpy(), numpy_config(g.numpy(), w), atol=1e-10)


def test_data_weights_change_the_direction():
    torch.manual_seed(2)
    g = torch.randn(3, 10, dtype=torch.float64)
    n = [1.0, 1.0, 20.0]
    a, b = config_g(g, n=n, weights="equal"), config_g(g, n=n, weights="data")
    assert torch.nn.functional.cosine_similarity(a, b, dim=0) < 1 - 1e-6


def test_equals_craft_model_granularity_round_zero_up_to_length():
    # CRAFT with reference 0 and no layer split gives ConFIG's direction (weights rho; config.md).
    torch.manual_seed(3)
    g = torch.randn(5, 24, dtype=torch.float64)
    n = [3.0, 1.0, 4.0, 1.0, 5.0]
    layout = ParamLayout((), ((0, 10), (10, 24)), ("a", "b"))
    b = batch(g, n=n, layout=layout)
    craft = build({"rule": "craft", "granularity": "model"}).aggregate(b).step
    conf = build({"rule": "config", "weights": "data"}).aggregate(b).step
    cos = torch.nn.functional.cosine_similarity(craft, conf, dim=0)
    assert float(cos) == pytest.approx(1.0, abs=1e-12)
    # with equal sample counts the equal-weight ConFIG direction is CRAFT's too
    craft_eq = build({"rule": "craft", "granularity": "model"}).aggregate(batch(g)).step
    conf_eq = build({"rule": "config"}).aggregate(batch(g)).step
    assert float(torch.nn.functional.cosine_similarity(craft_eq, conf_eq, dim=0)) == pytest.approx(
        1.0, abs=1e-12
    )


def test_zero_client_is_ignored_by_the_direction_and_the_length():
    # NaN -> 0: a zero row of U cannot be fitted, so pinv ignores it; it adds 0 to the length.
    torch.manual_seed(4)
    g = torch.randn(4, 12, dtype=torch.float64)
    with_zero = torch.cat([g[:2], torch.zeros(1, 12, dtype=torch.float64), g[2:]])
    torch.testing.assert_close(config_g(with_zero), config_g(g))


def test_all_zero_updates_give_zero_step():
    step = build({"rule": "config"}).aggregate(batch(torch.zeros(3, 5))).step
    assert torch.equal(step, torch.zeros(5)) and torch.isfinite(step).all()


def test_single_client_returns_its_pseudo_gradient():
    g = torch.tensor([[3.0, -4.0, 12.0]], dtype=torch.float64)
    torch.testing.assert_close(config_g(g), g[0])


def test_server_lr_and_sign():
    torch.manual_seed(5)
    g = torch.randn(3, 8, dtype=torch.float64)
    step = build({"rule": "config", "server_lr": 0.25}).aggregate(batch(g)).step
    torch.testing.assert_close(step, -0.25 * config_g(g))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keeps_dtype(dtype):
    step = build({"rule": "config"}).aggregate(batch(torch.randn(4, 9, dtype=dtype))).step
    assert step.dtype == dtype and step.shape == (9,)


@pytest.mark.parametrize("bad", [{"weights": "loss"}, {"server_lr": -1.0}, {"beta": 0.9}])
def test_bad_hparams_rejected(bad):
    with pytest.raises(pydantic.ValidationError):
        build({"rule": "config", **bad})
