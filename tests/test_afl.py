"""AFL: the spec vectors (projected, unbiased, exponentiated, averaged model), the simplex."""

import logging

import pytest
import torch

from fedcore.core import aggregators
from fedcore.core.aggregators.afl import project_simplex
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import UpdateBatch
from fedcore.core.round.probes import run_round


def _afl(n=4, **hp):
    agg = aggregators.build({"rule": "afl", "lambda_lr": 0.1, **hp})
    agg.setup(n, ParamLayout((), ((0, 2),), ("model",)))
    return agg


def _batch(ids, losses, deltas):
    d = torch.tensor(deltas, dtype=torch.float64)
    return UpdateBatch(deltas=d, num_samples=torch.ones(len(ids)),
                       stats={"loss_before": torch.tensor(losses, dtype=torch.float64)},
                       client_ids=torch.tensor(ids))


R1 = ([0, 2], [2.0, 1.0], [[1.0, 0.0], [0.0, 2.0]])
R2 = ([1, 2], [3.0, 0.5], [[-1.0, 1.0], [2.0, 0.0]])


def _t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_projected_normalized_spec_vector():
    agg = _afl()
    s1 = agg.aggregate(_batch(*R1)).step
    torch.testing.assert_close(s1, _t(0.5, 1.0))
    torch.testing.assert_close(agg.lam, _t(0.5, 0.1, 0.3, 0.1))
    res = agg.aggregate(_batch(*R2))
    torch.testing.assert_close(s1 + res.step, _t(1.75, 1.25))
    torch.testing.assert_close(agg.lam, _t(0.3, 0.5, 0.2, 0.0), atol=1e-12, rtol=0)
    assert res.metrics["afl/zero_mass"] == 0.0
    assert res.metrics["afl/lambda_max"] == pytest.approx(0.5)


def test_unbiased_weighting_spec_vector():
    agg = _afl(weighting="unbiased")
    s1 = agg.aggregate(_batch(*R1)).step
    s2 = agg.aggregate(_batch(*R2)).step
    torch.testing.assert_close(s1 + s2, _t(1.5, 1.2))


def test_exponentiated_spec_vector():
    agg = _afl(update="exponentiated")
    s1 = agg.aggregate(_batch(*R1)).step
    torch.testing.assert_close(agg.lam, _t(0.316519, 0.212169, 0.259144, 0.212169),
                               atol=1e-6, rtol=0)
    s2 = agg.aggregate(_batch(*R2)).step
    torch.testing.assert_close(s1 + s2, _t(1.149502, 1.450166), atol=1e-6, rtol=0)
    torch.testing.assert_close(agg.lam, _t(0.263396, 0.321713, 0.238331, 0.176560),
                               atol=1e-6, rtol=0)


def test_averaged_model_is_the_mean_of_the_iterates():
    agg = _afl(eval_model="average")
    theta = torch.zeros(2, dtype=torch.float64)
    theta = theta + agg.aggregate(_batch(*R1)).step
    torch.testing.assert_close(agg.eval_params(theta), _t(0.5, 1.0))
    theta = theta + agg.aggregate(_batch(*R2)).step
    torch.testing.assert_close(agg.eval_params(theta), _t(1.125, 1.125))
    assert torch.equal(_afl().eval_params(theta), theta)  # last iterate by default


def test_projection_regression_and_simplex_property():
    torch.testing.assert_close(project_simplex(_t(2.0, 0.8, 0.1)), _t(1.0, 0.0, 0.0))
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        y = torch.randn(7, dtype=torch.float64, generator=gen) * 3
        p = project_simplex(y)
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)  # (p >= 0: a clamp, by construction)
        # the projection's characterisation: <y - p, e_k - p> <= 0 for every vertex e_k
        assert float(((y - p) - (y - p) @ p).max()) <= 1e-12
        # optimality: p is at least as close to y as random simplex points
        q = torch.distributions.Dirichlet(torch.ones(7, dtype=torch.float64)).sample()
        assert (p - y).norm() <= (q - y).norm() + 1e-12


@pytest.mark.parametrize("hp", [{}, {"update": "exponentiated"}, {"lambda_min": 0.02},
                                {"weighting": "unbiased", "lambda_lr": 0.5}])
def test_lambda_stays_in_the_simplex(hp):
    agg = aggregators.build({"rule": "afl", **hp})
    agg.setup(10, ParamLayout((), ((0, 3),), ("model",)))
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        ids = torch.randperm(10, generator=gen)[:3].sort().values
        losses = torch.rand(3, generator=gen, dtype=torch.float64) * 3
        batch = UpdateBatch(deltas=torch.randn(3, 3, dtype=torch.float64, generator=gen),
                            num_samples=torch.ones(3), stats={"loss_before": losses},
                            client_ids=ids)
        before = agg.lam.clone()
        step = agg.aggregate(batch).step
        assert torch.isfinite(step).all()
        # implementation check: feasible by construction of the (floored) projection
        assert (agg.lam >= hp.get("lambda_min", 0.0) - 1e-15).all()
        assert float(agg.lam.sum()) == pytest.approx(1.0, abs=1e-12)
        # the check that can fail: an ascent step on the sampled losses, <g, lam+ - lam> >= 0
        # with g_k = (N/m) F_k on the sampled clients (projected and mirror ascent both)
        g = torch.zeros(10, dtype=torch.float64)
        g[ids] = (10 / 3) * losses
        assert float(g @ (agg.lam - before)) >= -1e-12


def test_full_participation_is_lambda_weighted_and_n1_is_fedavg():
    agg = _afl(n=2)
    lam = agg.lam.clone()
    b = _batch([0, 1], [1.0, 2.0], [[1.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(agg.aggregate(b).step, lam @ b.deltas)
    one = _afl(n=1)
    b1 = _batch([0], [5.0], [[3.0, 4.0]])
    torch.testing.assert_close(one.aggregate(b1).step, _t(3.0, 4.0))
    assert torch.equal(one.lam, _t(1.0))


def test_zero_mass_gives_no_step():
    agg = _afl()
    agg.lam = _t(0.5, 0.0, 0.5, 0.0)
    res = agg.aggregate(_batch([1, 3], [1.0, 1.0], [[1.0, 1.0], [2.0, 2.0]]))
    assert torch.equal(res.step, torch.zeros(2, dtype=torch.float64))
    assert res.metrics["afl/zero_mass"] == 1.0


def test_warning_when_the_lambda_step_is_too_large(caplog):
    from fedcore.core.compose.configure import _warn_once

    _warn_once.cache_clear()  # said once per process: this process may have said it already
    with caplog.at_level(logging.WARNING, logger="fedcore"):
        load_config(None, ["method=afl", "dataset.num_clients=20", "clients_per_round=5",
                           "method.aggregator.lambda_lr=0.05"])
    assert any("lambda_lr=0.05 > m/N^2=0.0125" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedcore"):
        load_config(None, ["method=afl", "dataset.num_clients=20", "clients_per_round=5"])
    assert not any("lambda_lr" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedcore"):  # once per process, not per build
        load_config(None, ["method=afl", "dataset.num_clients=20", "clients_per_round=5",
                           "method.aggregator.lambda_lr=0.05"])
    assert not any("lambda_lr" in r.getMessage() for r in caplog.records)


def test_lambda_floor_must_fit():
    with pytest.raises(ConfigError, match=r"method\.aggregator\.lambda_min"):
        load_config(None, ["method=afl", "dataset.num_clients=20",
                           "method.aggregator.lambda_min=0.1"])


def test_lambda_starts_uniform_whatever_the_sample_sizes():
    """lambda_0 = 1/N as in the reference codes (docs/methods/afl.md says why not n_k / n): the
    first round weights the sampled clients equally, whatever their sizes."""
    from fedcore.core.round.simulation import Simulation

    from .conftest import TINY

    sim = Simulation(load_config(None, [*TINY, "method=afl"]))
    sizes = [c.num_train for c in sim.data.clients]
    assert len(set(sizes)) > 1
    torch.testing.assert_close(sim.aggregator.lam, torch.full((6,), 1 / 6, dtype=torch.float64))
    ids = sim.sample_clients(1)
    seen = []
    sim.aggregator.aggregate = lambda b, f=sim.aggregator.aggregate: seen.append(
        sim.aggregator.lam[b.client_ids].clone()) or f(b)
    run_round(sim, 1)
    assert seen[0].tolist() == [1 / 6] * len(ids)
