"""The power-of-choice client sampler (docs/methods/power_of_choice.md)."""

import numpy as np
import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation
from fedcore.core.samplers import Population, build

from .conftest import TINY


def _pop(n, m, loss, sizes=None, round=1):
    calls = []

    def local_loss(ids):
        calls.append(list(ids))
        return np.array([loss[k] for k in ids], dtype=float)

    sizes = np.ones(n) if sizes is None else np.asarray(sizes, dtype=float)
    return Population(0, round, n, m, sizes, local_loss), calls


def test_picks_the_highest_loss_candidates():
    loss = np.arange(10.0)[::-1]  # client 0 has the highest loss
    sampler = build({"sampler": "power_of_choice", "d": 6})
    pop, calls = _pop(10, 3, loss)
    got = sampler.sample(pop)
    cand = calls[0]
    assert len(cand) == 6 and len(set(cand)) == 6
    assert list(got) == sorted(sorted(cand, key=lambda k: -loss[k])[:3])
    # d = N: every client is a candidate, so the m highest losses overall
    pop, _ = _pop(10, 3, loss)
    assert list(build({"sampler": "power_of_choice", "d": 10}).sample(pop)) == [0, 1, 2]


def test_candidates_follow_the_data_sizes():
    sizes = [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]  # clients 0..3 hold no data: never candidates
    seen = set()
    for r in range(1, 30):
        pop, calls = _pop(10, 2, np.zeros(10), sizes, round=r)
        build({"sampler": "power_of_choice", "d": 4}).sample(pop)
        seen.update(calls[0])
    assert seen == set(range(4, 10))


def test_run_is_reproducible_and_uses_the_global_models_loss():
    over = [*TINY, "rounds=1", "method.sampler={sampler: power_of_choice, d: 6}"]
    a, b = Simulation(load_config(None, over)), Simulation(load_config(None, over))
    got = a.sample_clients(1)
    assert np.array_equal(got, b.sample_clients(1))
    losses = a.local_loss(list(range(6)))
    assert list(got) == sorted(np.argsort(-losses, kind="stable")[:3].tolist())
    run_round(a, 1)
    run_round(b, 1)
    assert (a.params == b.params).all()


def test_bad_candidate_set_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"^method.sampler.d: .*allowed: 3..6 \(got 2\)"):
        load_config(None, [*TINY, "method.sampler={sampler: power_of_choice, d: 2}"])


def test_aggregate_shares_follow_the_data_shares():
    """Cho, Wang, Joshi average the selected clients with equal weights: the candidates already
    follow the data shares, so over many rounds each client's share of FedAvg's aggregate is its
    data share (up to Monte-Carlo error and the without-replacement candidate draw); weighting
    by n_k again gives the smallest tenth of the data about 0.28 of its share."""
    from fedcore.core.aggregators import REGISTRY as RULES
    from fedcore.core.records.aggregate import UpdateBatch

    sizes = np.linspace(10, 100, 100).round().astype(int)
    n, m, rounds = len(sizes), 5, 4000
    sampler = build({"sampler": "power_of_choice", "d": 10})
    rule = RULES.build({"rule": "fedavg"})
    rng = np.random.default_rng(1)
    share = np.zeros(n)
    for r in range(1, rounds + 1):
        loss = rng.random(n)  # losses that carry no information: only the sizes bias the draw
        ids = sampler.sample(Population(0, r, n, m, sizes.astype(float), lambda k, v=loss: v[k]))
        # one-hot deltas: the rule's step is each selected client's weight
        deltas = torch.zeros(len(ids), n, dtype=torch.float64)
        deltas[torch.arange(len(ids)), torch.as_tensor(ids)] = 1.0
        batch = UpdateBatch(deltas, torch.tensor(sampler.rule_sizes([int(sizes[k]) for k in ids])))
        share += rule.aggregate(batch).step.numpy()
    share /= rounds
    p = sizes / sizes.sum()
    se = np.sqrt(p / (m * rounds))  # binomial error of a client's share
    chi2 = float((((share - p) / se) ** 2).sum())
    assert chi2 < (n - 1) + 5 * np.sqrt(2 * (n - 1)), chi2  # old weighting: about 1,560
    for part in (slice(0, 10), slice(-10, None)):  # the smallest and the largest tenth
        assert abs(share[part].sum() / p[part].sum() - 1) < 0.1


def test_driver_hands_the_rule_equal_weights(monkeypatch):
    over = [*TINY, "rounds=1", "method.sampler={sampler: power_of_choice, d: 6}"]
    sim = Simulation(load_config(None, over))
    seen = []
    monkeypatch.setattr(sim.aggregator, "aggregate",
                        lambda batch, f=sim.aggregator.aggregate: seen.append(batch) or f(batch))
    run_round(sim, 1)
    assert len({c.num_train for c in sim.data.clients}) > 1  # sizes differ, weights do not
    assert seen[0].num_samples.tolist() == [1.0] * 3
