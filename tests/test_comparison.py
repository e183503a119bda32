"""Comparisons over seeds on real simulations: what a seed fixes for every method, and the
reference row of a setting (fedcore.stats.comparison; the tests: tests/test_families.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from fedcore.core.compose.configure import build_config
from fedcore.core.config import config_dir, read_yaml
from fedcore.core.engines.sequential import client_seed
from fedcore.core.round.simulation import Simulation
from fedcore.stats.comparison import reference_rows, with_intervals

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


def test_the_reference_row_of_a_setting_is_found():
    runs = pd.DataFrame({
        "row": ["ref"] * 3 + ["x"] * 2, "method": ["fedavg"] * 3 + ["x"] * 2,
        "dataset": ["d"] * 5, "alpha": [0.1] * 5, "seed": [0, 1, 2, 1, 2],
        "accuracy": [0.5, 0.6, 0.7, 0.9, 0.95]})
    assert reference_rows(runs, "fedavg") == {("d", 0.1): "ref"}
    assert reference_rows(runs, "nope") == {}
    table = with_intervals(runs, ["accuracy"], ["row"])
    assert list(table["seeds"]) == [3, 2]


def test_batch_order_stream_is_the_same_for_every_method_at_a_seed():
    def seed_of(cfg, rnd, client):
        return client_seed(SimpleNamespace(cfg=cfg, round=rnd), client)  # type: ignore[arg-type]

    fedavg, krum, other = _cfg("fedavg", 3), _cfg("krum", 3), _cfg("fedavg", 4)
    assert seed_of(fedavg, 2, 7) == seed_of(krum, 2, 7)
    assert seed_of(fedavg, 2, 7) != seed_of(other, 2, 7)
    assert seed_of(fedavg, 2, 7) != seed_of(fedavg, 3, 7) != seed_of(fedavg, 2, 8)


def test_a_row_interval_past_the_range_of_an_accuracy_is_cut_and_shown_whole():
    from fedcore.stats.comparison import half_width

    runs = pd.DataFrame({"row": ["a"] * 3, "seed": [0, 1, 2], "acc": [0.99, 0.90, 0.97]})
    line = with_intervals(runs, ["acc"], ["row"], {"acc": (0.0, 1.0)}).iloc[0]
    assert line["acc_high"] == 1.0 and line["acc_low"] > 0.7 and line["acc_resolved"]
    text = half_width(line["acc_mean"], line["acc_low"], line["acc_high"], 3, ".4f")
    assert text == f"{line['acc_mean']:.4f} [{line['acc_low']:.4f}, 1.0000]"  # not mean ± half
    uncut = with_intervals(runs, ["acc"], ["row"]).iloc[0]
    assert uncut["acc_high"] > 1.0


def test_a_row_interval_spanning_the_whole_range_has_no_resolution():
    from fedcore.stats.comparison import half_width

    runs = pd.DataFrame({"row": ["a"] * 3, "seed": [0, 1, 2], "acc": [0.05, 0.95, 0.5]})
    line = with_intervals(runs, ["acc"], ["row"], {"acc": (0.0, 1.0)}).iloc[0]
    assert not line["acc_resolved"]
    assert half_width(line["acc_mean"], line["acc_low"], line["acc_high"], 3, ".4f",
                      line["acc_resolved"]) == "0.5000 (no resolution at n = 3)"


def test_the_report_shows_the_unseen_clients_and_samples_and_the_gap_interval():
    from fedcore.report.exploratory import exploratory_table
    from fedcore.report.summary import COLUMNS
    from fedcore.stats.comparison import half_width
    from fedcore.tracking.report import summary_table

    recs = []
    for seed, (gap, clients, samples) in enumerate([(0.05, 4, 210), (0.07, 4, 190),
                                                    (0.06, 4, 200)]):
        line = {"row": "fedavg", "method": "fedavg", "hparams": "default", "tuning": "",
                "dataset": "digits", "alpha": 0.1, "seed": seed, "status": "FINISHED",
                "failure": "", "rounds": 20, **{key: 0.8 for key, _, _ in COLUMNS}}
        line.update(participation_gap=gap, unseen_clients=clients, unseen_samples=samples,
                    rounds_to_target=5.0)
        recs.append(line)
    table = summary_table(pd.DataFrame(recs))
    shown = exploratory_table(table, {}).iloc[0]
    assert "unseen clients" not in shown and "participation gap" not in shown  # in table.csv
    assert (table.loc[0, "unseen_clients_mean"], table.loc[0, "unseen_samples_mean"]) == (4, 200)
    low, high = table.loc[0, "participation_gap_low"], table.loc[0, "participation_gap_high"]
    assert half_width(table.loc[0, "participation_gap_mean"], low, high, 3, ".4f").startswith(
        "0.0600 ± 0.02")  # with its 95 % interval


def test_a_detectable_difference_past_the_range_reads_no_resolution():
    from fedcore.report.exploratory import detectable_vs_reference

    def runs(values):
        return pd.DataFrame([{"row": r, "method": r, "dataset": "digits", "alpha": 0.1,
                              "seed": s, "status": "FINISHED", "accuracy_last_k": v}
                             for r, vs in values.items() for s, v in enumerate(vs)])

    wide = detectable_vs_reference(runs({"fedavg": [0.1, 0.9, 0.5],
                                         "craft": [0.9, 0.1, 0.5]}), "fedavg")
    assert wide[("digits", 0.1, "craft")] == "no resolution at n = 3"
    tight = detectable_vs_reference(runs({"fedavg": [0.80, 0.82, 0.81],
                                          "craft": [0.79, 0.82, 0.80]}), "fedavg")
    assert tight[("digits", 0.1, "craft")].startswith("±0.0")
