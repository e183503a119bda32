"""Comparisons over seeds on real simulations: the pairing by seed, identical methods, a clearly
worse method, and the best-row marks (fedcore.pipeline.comparison)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fedcore.config import config_dir, read_yaml
from fedcore.configure import build_config
from fedcore.engines.sequential import client_seed
from fedcore.pipeline.comparison import best_marks, reference_rows, versus_reference, with_intervals
from fedcore.simulation import Simulation, run

SMALL = {"model.name": "mlp", "rounds": 3, "dataset.alpha": 0.1, "dataset.num_clients": 10,
         "clients_per_round": 5, "local.epochs": 1}


def _cfg(method: str, seed: int, **extra):
    return build_config(read_yaml(config_dir() / "experiment.yaml"),
                        {**SMALL, "method": method, "seed": seed, **extra})


def test_a_seed_fixes_partition_initial_model_sampling_and_batch_order_for_every_method():
    a, b = Simulation(_cfg("fedavg", 3)), Simulation(_cfg("krum", 3))
    other = Simulation(_cfg("fedavg", 4))
    for left, right in zip(a.data.partition, b.data.partition, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(left, right, strict=True))
    assert torch.equal(a.params, b.params)
    assert all(np.array_equal(a.sample_clients(r), b.sample_clients(r)) for r in range(1, 4))
    # another seed changes each of them
    assert not torch.equal(a.params, other.params)
    assert any(not np.array_equal(a.sample_clients(r), other.sample_clients(r))
               for r in range(1, 4))
    assert any(len(x[0]) != len(y[0]) or not np.array_equal(x[0], y[0])
               for x, y in zip(a.data.partition, other.data.partition, strict=True))


def _runs(rows: dict[str, dict], seeds: range) -> pd.DataFrame:
    lines = []
    for row, spec in rows.items():
        for seed in seeds:
            result = run(_cfg(spec["method"], seed, **spec.get("set", {})))
            lines.append({"row": row, "method": spec["method"], "dataset": "digits",
                          "alpha": 0.1, "seed": seed,
                          "accuracy": result.summary["final/accuracy"],
                          "worst10": result.summary["final/accuracy_worst10"]})
    return pd.DataFrame(lines)


@pytest.mark.slow
def test_identical_methods_are_indistinguishable_and_krum_is_worse():
    # Krum keeps one client's update per round: at Dirichlet 0.1 it is far behind FedAvg.
    runs = _runs({"fedavg": {"method": "fedavg"}, "fedavg again": {"method": "fedavg"},
                  "krum": {"method": "krum"}}, range(6))
    tests = {(t.row, t.metric): t.comparison for t in versus_reference(runs, "fedavg")}
    same = tests[("fedavg again", "accuracy")]
    assert same.verdict == "indistinguishable" and same.difference.mean == 0.0
    krum = tests[("krum", "accuracy")]
    assert krum.verdict == "worse" and krum.p_adjusted < 0.05 and krum.difference.high < 0
    assert krum.n == 6 and krum.p_adjusted >= krum.p  # Holm over the table's rows
    marks = best_marks(runs)
    assert marks[("digits", 0.1, "krum")] == ""
    assert {marks[("digits", 0.1, r)] for r in ("fedavg", "fedavg again")} == {"best", "≈ best"}
    table = with_intervals(runs, ["accuracy"], ["row"])
    assert (table["seeds"] == 6).all() and (table["accuracy_low"] < table["accuracy_mean"]).all()


def test_rows_are_paired_on_the_seeds_both_have_and_the_reference_is_found():
    runs = pd.DataFrame({
        "row": ["ref"] * 3 + ["x"] * 2, "method": ["fedavg"] * 3 + ["x"] * 2,
        "dataset": ["d"] * 5, "alpha": [0.1] * 5, "seed": [0, 1, 2, 1, 2],
        "accuracy": [0.5, 0.6, 0.7, 0.9, 0.95], "worst10": [0.1, 0.2, 0.3, 0.3, 0.4]})
    assert reference_rows(runs, "fedavg") == {("d", 0.1): "ref"}
    tests = {t.metric: t.comparison for t in versus_reference(runs, "fedavg")}
    assert tests["accuracy"].n == 2  # seed 0 has no partner
    assert tests["accuracy"].difference.mean == pytest.approx(((0.9 - 0.6) + (0.95 - 0.7)) / 2)
    assert versus_reference(runs, "nope") == []


def test_batch_order_stream_is_the_same_for_every_method_at_a_seed():
    def seed_of(cfg, rnd, client):
        return client_seed(SimpleNamespace(cfg=cfg, round=rnd), client)  # type: ignore[arg-type]

    fedavg, krum, other = _cfg("fedavg", 3), _cfg("krum", 3), _cfg("fedavg", 4)
    assert seed_of(fedavg, 2, 7) == seed_of(krum, 2, 7)
    assert seed_of(fedavg, 2, 7) != seed_of(other, 2, 7)
    assert seed_of(fedavg, 2, 7) != seed_of(fedavg, 3, 7) != seed_of(fedavg, 2, 8)
