"""Per-client statistics reach the rule and the round metrics in float64 (issue 33): they are
numbers about the clients (losses, learning rates, sample counts), not model tensors."""

import math

from fedcore.core.compose.configure import load_config
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation

from .conftest import TINY


def _round_one(method, monkeypatch):
    sim = Simulation(load_config(None, [*TINY, "rounds=1", f"method={method}"]))
    seen = {}
    train, aggregate = sim.engine.train_round, sim.aggregator.aggregate

    def trained(rc, ids, order):
        seen["updates"] = train(rc, ids, order)
        return seen["updates"]

    def aggregated(batch):
        seen["batch"] = batch
        return aggregate(batch)

    # the sequential engine is a module: patched for this test only, never for later ones
    monkeypatch.setattr(sim.engine, "train_round", trained)
    monkeypatch.setattr(sim.aggregator, "aggregate", aggregated)
    metrics = run_round(sim, 1)
    return metrics, list(seen["updates"].values()), seen["batch"]


def test_rule_statistics_are_float64_and_exact(monkeypatch):
    _, ups, batch = _round_one("qfedavg", monkeypatch)  # a rule that reads the clients' loss and lr
    by_id = {u.client_id: u for u in ups}
    for key in ("loss_before", "local_lr"):
        column = batch.stats[key]
        assert column.dtype.is_floating_point and column.element_size() == 8, key
        want = [float(by_id[int(k)].stats[key]) for k in batch.client_ids]
        assert column.tolist() == want, key  # the clients' own numbers, not float32 roundings


def test_train_loss_is_a_float64_weighted_mean(monkeypatch):
    metrics, ups, _ = _round_one("fedavg", monkeypatch)
    n = [float(u.num_samples) for u in ups]
    want = math.fsum(float(u.train_loss) * k for u, k in zip(ups, n, strict=True)) / sum(n)
    assert math.isclose(metrics["train/loss"], want, rel_tol=1e-12, abs_tol=0.0)
