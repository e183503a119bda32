"""Robust baselines: Krum / Multi-Krum, trimmed mean and median, RFA and the geometric median
(docs/methods/krum.md, trimmed_mean.md, rfa.md). Hand-checked values, then two attackers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from scipy.optimize import minimize

from fedcore.core.aggregators import build
from fedcore.core.aggregators.krum import effective_byzantine, krum_scores
from fedcore.core.aggregators.rfa import smoothed_weiszfeld
from fedcore.core.records.aggregate import UpdateBatch


def step(rule: str, deltas: torch.Tensor, n=None, **hp) -> tuple[torch.Tensor, dict]:
    agg = build({"rule": rule, **hp})
    n = torch.ones(deltas.shape[0]) if n is None else torch.as_tensor(n)
    res = agg.aggregate(UpdateBatch(deltas=deltas, num_samples=n))
    out = res.step
    return out, res.metrics


# ---- Krum / Multi-Krum ----------------------------------------------------------------------

# a=(0,0) b=(1,0) c=(0,2) d=(1,1) e=(10,10); squared distances:
# ab 1, ac 4, ad 2, ae 200, bc 5, bd 1, be 181, cd 2, ce 164, de 162
KRUM_POINTS = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [10.0, 10.0]])


def test_krum_scores_by_hand():
    # m = 5, f = floor((5-3)/2) = 1: the m - f - 2 = 2 nearest others
    assert effective_byzantine(5, None) == 1
    want = torch.tensor([3.0, 2, 6, 3, 326], dtype=torch.float64)  # scores are float64
    torch.testing.assert_close(krum_scores(KRUM_POINTS, 1), want)
    # f = 0: the 3 nearest others
    want = torch.tensor([7.0, 7, 11, 5, 507], dtype=torch.float64)
    torch.testing.assert_close(krum_scores(KRUM_POINTS, 0), want)


def test_krum_returns_the_lowest_score_delta():
    out, metrics = step("krum", KRUM_POINTS)
    torch.testing.assert_close(out, torch.tensor([1.0, 0.0]))  # b
    assert metrics == {"krum/num_byzantine": 1.0, "krum/f_reduced": 0.0, "krum/selected": 1.0}
    out, _ = step("krum", KRUM_POINTS, num_byzantine=0)
    torch.testing.assert_close(out, torch.tensor([1.0, 1.0]))  # d
    out, _ = step("krum", KRUM_POINTS, server_lr=0.5)
    torch.testing.assert_close(out, torch.tensor([0.5, 0.0]))


def test_multikrum_averages_the_lowest_scores_unweighted():
    n = torch.tensor([1.0, 50.0, 3.0, 7.0, 2.0])  # ignored: the plain mean
    out, metrics = step("multikrum", KRUM_POINTS, n)  # M = m - f = 4: b, a, d, c
    torch.testing.assert_close(out, torch.tensor([0.5, 0.75]))
    assert metrics["krum/selected"] == 4.0
    out, _ = step("multikrum", KRUM_POINTS, n, num_selected=3)  # b, a, d
    torch.testing.assert_close(out, torch.tensor([2 / 3, 1 / 3]))


def test_krum_reduces_an_invalid_f():
    # m = 5 needs m > 2f + 2, so f = 5 is reduced to 1 and reported
    out, metrics = step("krum", KRUM_POINTS, num_byzantine=5)
    assert metrics["krum/num_byzantine"] == 1.0 and metrics["krum/f_reduced"] == 1.0
    torch.testing.assert_close(out, torch.tensor([1.0, 0.0]))
    assert [effective_byzantine(m, None) for m in (1, 2, 3, 4, 5, 6, 7)] == [0, 0, 0, 0, 1, 1, 2]
    assert effective_byzantine(10, 2) == 2


@pytest.mark.parametrize("rule", ["krum", "multikrum"])
def test_krum_tiny_batches(rule):
    one = torch.tensor([[3.0, -1.0]])
    torch.testing.assert_close(step(rule, one)[0], one[0])
    two = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
    out, _ = step(rule, two)
    expected = two[0] if rule == "krum" else two.mean(0)
    torch.testing.assert_close(out, expected)


# ---- trimmed mean and median ----------------------------------------------------------------

TRIM = torch.tensor(
    [[1.0, 10.0, -3.0], [2.0, 20.0, 0.0], [3.0, -5.0, 7.0], [100.0, 0.0, 1.0], [4.0, 5.0, 2.0]]
)


def test_trimmed_mean_by_hand():
    # beta = 0.2, m = 5: drop 1 per side; columns sorted (1 2 3 4 100) (-5 0 5 10 20) (-3 0 1 2 7)
    out, metrics = step("trimmed_mean", TRIM, trim_fraction=0.2)
    torch.testing.assert_close(out, torch.tensor([3.0, 5.0, 1.0]))
    assert metrics["trimmed_mean/num_trimmed"] == 1.0
    # beta = 0.1: floor(0.5) = 0, the plain mean (unweighted, n ignored)
    out, _ = step("trimmed_mean", TRIM, torch.tensor([1.0, 9, 1, 1, 1]), trim_fraction=0.1)
    torch.testing.assert_close(out, torch.tensor([22.0, 6.0, 1.4]))
    # beta = 0.4: drop 2 per side, the median
    out, _ = step("trimmed_mean", TRIM, trim_fraction=0.4)
    torch.testing.assert_close(out, torch.tensor([3.0, 5.0, 1.0]))


def test_trimmed_mean_floor_of_beta_m():
    x = torch.arange(100.0)[:, None].repeat(1, 2)
    _, metrics = step("trimmed_mean", x, trim_fraction=0.29)  # 0.29 * 100 = 28.999... in floats
    assert metrics["trimmed_mean/num_trimmed"] == 29.0


@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 10])
def test_median_matches_numpy(m):
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 33, generator=g, dtype=torch.float64)
    out, _ = step("median", x)
    np.testing.assert_allclose(out.numpy(), np.median(x.numpy(), axis=0), rtol=0, atol=1e-15)
    if m % 2 == 0:  # torch.median would give the lower middle value
        assert not torch.allclose(out, x.median(dim=0).values)


# ---- RFA / geometric median -----------------------------------------------------------------

TRI = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
TRI_N = torch.tensor([2.0, 3.0, 4.0], dtype=torch.float64)


def test_geometric_median_matches_scipy():
    p = (TRI_N / TRI_N.sum()).numpy()
    pts = TRI.numpy()

    def objective(x):
        return float(sum(pk * np.linalg.norm(x - xk) for pk, xk in zip(p, pts, strict=True)))

    ref = minimize(objective, pts.mean(0), method="Nelder-Mead",
                   options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 5000}).x  # fmt: skip
    out, metrics = step("geometric_median", TRI, TRI_N, iterations=1000, tol=0.0)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-4)
    assert metrics["rfa/iterations_run"] == 1000.0
    # the default early stop gets there too, in far fewer steps
    # the default early stop (relative objective decrease < 1e-5) ends near the optimum in
    # objective, less so in position (Weiszfeld converges linearly on a flat minimum)
    out, metrics = step("geometric_median", TRI, TRI_N)
    assert objective(out.numpy()) == pytest.approx(objective(ref), rel=1e-4)
    np.testing.assert_allclose(out.numpy(), ref, atol=0.05)
    assert 1 <= metrics["rfa/iterations_run"] < 100
    out, _ = step("geometric_median", TRI, TRI_N, tol=1e-9)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-3)
    # and it is not the weighted mean
    assert np.linalg.norm(ref - p @ pts) > 0.1


def test_rfa_three_weiszfeld_steps_by_hand():
    p = TRI_N / TRI_N.sum()
    v = p @ TRI  # v^0 = sum alpha_k Delta_k with alpha = p
    for _ in range(3):
        beta = p / torch.linalg.vector_norm(TRI - v, dim=1).clamp(min=1e-6)
        v = (beta @ TRI) / beta.sum()
    out, metrics = step("rfa", TRI, TRI_N)
    torch.testing.assert_close(out, v)
    assert metrics == {"rfa/iterations_run": 3.0}
    out, _ = step("rfa", TRI, TRI_N, iterations=0)
    torch.testing.assert_close(out, p @ TRI)


def test_weighted_geometric_median_sits_on_a_majority_point():
    # a point holding more than half of the weight is the weighted geometric median
    out, _ = step("geometric_median", TRI, torch.tensor([6.0, 2.0, 2.0], dtype=torch.float64))
    np.testing.assert_allclose(out.numpy(), TRI[0].numpy(), atol=1e-4)


def test_weiszfeld_smoothing_at_a_data_point():
    # v^0 lands exactly on a data point: nu keeps beta finite
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    v, steps = smoothed_weiszfeld(x, torch.full((3,), 1 / 3, dtype=torch.float64), 5, 1e-6, 0.0)
    assert torch.isfinite(v).all() and steps == 5
    torch.testing.assert_close(v, torch.zeros(2, dtype=torch.float64))


# ---- robustness: 8 honest clients near mu, 2 attackers ---------------------------------------


def attacked(kind: str, distance: float = 10.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    d = 50
    mu = torch.randn(d, generator=g)
    honest = mu + 0.1 * mu.norm() / d**0.5 * torch.randn(8, d, generator=g)
    if kind == "scaled":
        attackers = -10.0 * honest[:2]
    else:  # far away (distance x ||mu||), close to each other
        far = mu + distance * mu.norm() * torch.randn(d, generator=g) / d**0.5
        attackers = far + 0.01 * torch.randn(2, d, generator=g)
    return torch.cat([honest, attackers]), honest


ROBUST = [
    ("krum", {}),
    ("multikrum", {}),
    ("trimmed_mean", {"trim_fraction": 0.2}),  # beta must exceed the attacker share 2/10
    ("median", {}),
    ("rfa", {}),
    ("geometric_median", {}),
]


@pytest.mark.parametrize("kind", ["scaled", "far"])
@pytest.mark.parametrize("rule,hp", ROBUST, ids=[r for r, _ in ROBUST])
def test_robust_rule_stays_near_the_honest_mean(rule, hp, kind):
    deltas, honest = attacked(kind)
    target = honest.mean(0)
    scale = float(target.norm())
    fedavg, _ = step("fedavg", deltas)
    assert float((fedavg - target).norm()) > 1.5 * scale  # the attack works on FedAvg
    out, _ = step(rule, deltas, **hp)
    assert float((out - target).norm()) < 0.15 * scale
    if rule == "krum":  # Krum picks one of the honest clients
        assert any(torch.equal(out, h) for h in honest)


@pytest.mark.parametrize("rule,hp", [("geometric_median", {}), ("rfa", {"iterations": 10})])
def test_weiszfeld_far_attack_needs_enough_steps(rule, hp):
    # attackers 100 ||mu|| away: v^0 (the mean) starts ~20 ||mu|| off; 3 steps get it to
    # ~0.35 ||mu||, 10 steps or the run to convergence to ~0.03 ||mu||
    deltas, honest = attacked("far", distance=100.0)
    target = honest.mean(0)
    out, _ = step(rule, deltas, **hp)
    assert float((out - target).norm()) < 0.1 * float(target.norm())


# ---- hyper-parameter validation -------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"rule": "trimmed_mean", "trim_fraction": 0.5},
        {"rule": "trimmed_mean", "trim_fraction": -0.1},
        {"rule": "krum", "num_byzantine": -1},
        {"rule": "krum", "num_selected": 3},
        {"rule": "multikrum", "num_selected": 0},
        {"rule": "rfa", "nu": 0.0},
        {"rule": "geometric_median", "tol": -1.0},
        {"rule": "median", "trim_fraction": 0.1},
    ],
)
def test_bad_hyperparameters_are_rejected(spec):
    with pytest.raises(ValidationError):
        build(spec)


def test_defaults():
    assert build({"rule": "rfa"}).hp.iterations == 3 and build({"rule": "rfa"}).hp.tol == 0.0
    gm = build({"rule": "geometric_median"}).hp
    assert gm.iterations == 100 and gm.tol == 1e-5 and gm.nu == 1e-6
    assert build({"rule": "trimmed_mean"}).hp.trim_fraction == 0.1
    assert build({"rule": "multikrum"}).hp.num_selected is None
