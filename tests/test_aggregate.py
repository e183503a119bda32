"""Across-settings estimates (fedcore.stats.aggregate): IQM and its stratified bootstrap
interval against a direct computation, probability of improvement, ranks and their gating."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fedcore.report.across_settings import aggregate_section
from fedcore.stats import aggregate as agg


def _runs(settings: int, rows: dict[str, float], seeds: int = 3, noise: float = 0.01,
          grid: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    recs = []
    for s in range(settings):
        for row, shift in rows.items():
            for seed in range(seeds):
                recs.append({"row": row, "method": row, "dataset": "digits", "alpha": 0.1 * (s + 1),
                             "seed": seed, "accuracy": 0.8 + shift + rng.normal(0, noise),
                             "worst10": 0.5 + shift + rng.normal(0, noise)})
    runs = pd.DataFrame(recs)
    if grid:
        runs["grid:local.epochs"] = 1
    return runs


def test_iqm_is_the_mean_of_the_middle_half():
    assert agg.interquartile_mean(np.arange(1.0, 9.0)) == 4.5  # 3, 4, 5, 6
    assert agg.interquartile_mean(np.array([0.0, 1.0, 1.0, 1.0, 100.0])) == 1.0


def _direct_iqm(values: list[float]) -> float:
    v = sorted(values)
    cut = len(v) // 4
    middle = v[cut : len(v) - cut]
    return sum(middle) / len(middle)


def _direct_percentile(values: list[float], q: float) -> float:
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (pos - lo)


def test_iqm_interval_matches_a_direct_stratified_bootstrap():
    groups = {"a": np.array([0.61, 0.64, 0.70]), "b": np.array([0.81, 0.79, 0.90, 0.85])}
    est = agg.iqm_estimate(groups, np.random.default_rng(7), reps=300)
    rng = np.random.default_rng(7)
    ia = rng.integers(0, 3, size=(300, 3))
    ib = rng.integers(0, 4, size=(300, 4))
    replicates = [_direct_iqm([groups["a"][i] for i in ia[r]] + [groups["b"][i] for i in ib[r]])
                  for r in range(300)]
    assert est.value == pytest.approx(_direct_iqm([0.61, 0.64, 0.70, 0.81, 0.79, 0.90, 0.85]),
                                      abs=1e-15)
    assert est.low == pytest.approx(_direct_percentile(replicates, 0.025), abs=1e-12)
    assert est.high == pytest.approx(_direct_percentile(replicates, 0.975), abs=1e-12)
    assert (est.runs, est.settings) == (7, 2) and est.low < est.value < est.high


def test_the_bootstrap_redraws_within_each_setting():
    groups = [np.array([-1.0, -2.0, -3.0]), np.array([1.0, 2.0])]
    negatives = agg.stratified_bootstrap(groups, lambda m: (m < 0).sum(axis=1),
                                         np.random.default_rng(1), reps=500)
    assert set(negatives.tolist()) == {3}  # every replicate holds 3 of a's runs, 2 of b's


def test_the_same_runs_give_the_same_numbers_bit_for_bit():
    runs = _runs(3, {"fedavg": 0.0, "craft": 0.02, "scaffold": -0.01})
    a = agg.summary_table(runs, "fedavg", "accuracy", seed=3, reps=500)
    b = agg.summary_table(runs.sample(frac=1.0, random_state=1), "fedavg", "accuracy", seed=3,
                          reps=500)
    b = b.set_index("row").loc[a["row"]].reset_index()  # rows in order of first appearance
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    floats = ["iqm", "iqm_low", "iqm_high", "p_improvement_low", "p_improvement_high"]
    assert a[floats].to_numpy().tobytes() == b[floats].to_numpy().tobytes()
    c = agg.summary_table(runs, "fedavg", "accuracy", seed=4, reps=500)
    assert not np.array_equal(a["iqm_low"], c["iqm_low"])  # the seed is what draws


def _by_seed(groups):
    return {s: dict(enumerate(v)) for s, v in groups.items()}


def test_probability_of_improvement_is_paired_by_seed():
    assert agg.paired_wins(np.array([1.0, 2.0, 0.0]), np.array([0.0, 2.0, 1.0])) == 0.5
    g = {"s1": np.array([0.7, 0.8, 0.8]), "s2": np.array([0.5, 0.5, 0.6])}
    est = agg.improvement_estimate(_by_seed(g), _by_seed(g), np.random.default_rng(0), reps=400)
    assert (est.value, est.low, est.high) == (0.5, 0.5, 0.5)  # ties on every seed
    better = {"s1": g["s1"] + 1, "s2": g["s2"] + 1, "s3": np.array([0.0])}
    est = agg.improvement_estimate(_by_seed(better), _by_seed(g), np.random.default_rng(0),
                                   reps=400)
    assert (est.value, est.low, est.high, est.settings) == (1.0, 1.0, 1.0, 2)  # s3: X alone
    # per setting, then averaged: wins everywhere in s1, loses everywhere in s2
    mixed = {"s1": g["s1"] + 1, "s2": g["s2"] - 1}
    assert agg.improvement_estimate(_by_seed(mixed), _by_seed(g), np.random.default_rng(0),
                                    reps=10).value == 0.5
    # a seed-level effect: the row is 0.01 better on every seed, though the seeds spread by 0.2;
    # an unpaired comparison of runs (Mann-Whitney) would give 5/9, paired gives 1
    ref = {"s": {0: 0.5, 1: 0.7, 2: 0.9}}
    row = {"s": {k: v + 0.01 for k, v in ref["s"].items()}}
    assert agg.improvement_estimate(row, ref, np.random.default_rng(0), reps=10).value == 1.0
    # only the seeds both ran are paired
    partial = {"s": {0: 0.6, 5: 0.0}}
    est = agg.improvement_estimate(partial, ref, np.random.default_rng(0), reps=10)
    assert est.value == 1.0 and est.runs == 1


def test_the_section_pools_the_seeds_every_row_ran_in_every_setting(tmp_path):
    runs = _runs(2, {"fedavg": 0.0, "craft": 0.02}, seeds=5)
    # the looks ran seeds 3-4 of fedavg in the first setting only
    runs = runs[~((runs["seed"] >= 3) & ~((runs["row"] == "fedavg") & (runs["alpha"] < 0.15)))]
    assert agg.common_seeds(runs) == [0, 1, 2]
    md, _ = aggregate_section(runs, "fedavg", tmp_path, reps=100, metrics=("accuracy",))
    assert "On the 3 seeds every row ran in every setting (seeds 0-2); 2 runs on other " \
           "seeds" in md
    assert "| fedavg | 6 | 2 |" in md and "| craft | 6 | 2 |" in md  # 3 per setting each
    csv = pd.read_csv(tmp_path / "aggregate.csv").set_index("row")
    kept = runs[runs["seed"] <= 2]
    fed = kept[kept["row"] == "fedavg"]["accuracy"].to_numpy()
    assert csv.loc["fedavg", "iqm"] == pytest.approx(agg.interquartile_mean(fed))


def test_the_reference_row_has_no_improvement_and_the_rest_do():
    runs = _runs(2, {"fedavg": 0.0, "craft": 0.05})
    table = agg.summary_table(runs, "fedavg", "accuracy", reps=200).set_index("row")
    assert math.isnan(table.loc["fedavg", "p_improvement"])
    assert table.loc["craft", "p_improvement"] == 1.0
    assert list(table.index) == ["fedavg", "craft"]


def test_performance_profile():
    groups = {"s1": np.array([0.1, 0.2]), "s2": np.array([0.3, 0.4])}
    prof = agg.performance_profile(groups, np.array([0.0, 0.15, 0.35, 0.5]),
                                   np.random.default_rng(0), reps=100)
    assert prof["fraction"].tolist() == [1.0, 0.75, 0.25, 0.0]
    assert (prof["low"] <= prof["fraction"]).all() and (prof["fraction"] <= prof["high"]).all()


def test_settings_are_dataset_alpha_and_grid_columns():
    runs = _runs(2, {"fedavg": 0.0}, grid=True)
    assert agg.setting_columns(runs) == ["dataset", "alpha", "grid:local.epochs"]
    assert agg.n_settings(runs) == 2
    assert agg.setting_labels(runs).iloc[0] == "dataset=digits alpha=0.1 local.epochs=1"


def test_average_ranks_and_the_critical_difference_gate():
    rows = {"a": 0.03, "b": 0.0, "c": -0.03}
    few = agg.rank_test(_runs(4, rows, noise=0.0), "accuracy")
    assert few.ranks.to_dict() == {"a": 1.0, "b": 2.0, "c": 3.0}
    assert math.isnan(few.cd) and "at least 5 settings" in few.reason and "Demšar" in few.reason
    enough = agg.rank_test(_runs(5, rows, noise=0.0), "accuracy")
    assert enough.reason == "" and enough.settings == 5
    assert enough.cd == pytest.approx(2.3437 * math.sqrt(3 * 4 / (6 * 5)), rel=1e-4)
    assert enough.statistic == pytest.approx(10.0) and enough.p < 0.01  # 12N/(k(k+1)) sum..
    two = agg.rank_test(_runs(6, {"a": 0.0, "b": 0.01}), "accuracy")
    assert math.isnan(two.cd) and "needs at least 3 rows" in two.reason


def test_ties_share_their_rank_and_rows_missing_a_setting_are_left_out():
    runs = _runs(2, {"a": 0.0, "b": 0.0, "c": -0.1}, noise=0.0)
    runs = runs[~((runs["row"] == "c") & (runs["alpha"] > 0.15))]
    test = agg.rank_test(runs, "accuracy")
    assert test.ranks.to_dict() == {"a": 1.5, "b": 1.5}


def test_nemenyi_quantiles_are_demsars():
    # Demšar 2006, table 5(a): q_0.05 for k = 2, 3, 5, 10
    for k, q in ((2, 1.960), (3, 2.343), (5, 2.728), (10, 3.164)):
        assert agg.nemenyi_cd(k, 6) / math.sqrt(k * (k + 1) / 36) == pytest.approx(q, abs=1e-3)


def test_cliques_join_rows_closer_than_the_critical_difference():
    ranks = pd.Series({"a": 1.0, "b": 1.5, "c": 2.8, "d": 3.0})
    assert agg.cliques(ranks, 1.0) == [["a", "b"], ["c", "d"]]
    assert agg.cliques(ranks, 2.0) == [["a", "b", "c"], ["b", "c", "d"]]
    assert agg.cliques(ranks, 0.1) == []


def test_the_section_names_its_files_and_draws_a_cd_diagram_only_with_enough_settings(tmp_path):
    rows = {"fedavg": 0.0, "craft": 0.02, "scaffold": -0.01}
    md, files = aggregate_section(_runs(2, rows), "fedavg", tmp_path / "two", reps=200)
    names = sorted(p.name for p in files)
    assert names == ["aggregate.csv", "profile_accuracy.png", "profile_worst10.png"]
    assert md.startswith("## Across settings") and "| craft | 6 | 2 |" in md
    assert "no critical-difference diagram: it needs at least 5 settings" in md
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in files if p.suffix == ".png")
    md, files = aggregate_section(_runs(5, rows), "fedavg", tmp_path / "five", reps=200,
                                      metrics=("accuracy",))
    assert sorted(p.name for p in files) == ["aggregate.csv", "cd_accuracy.png",
                                             "profile_accuracy.png"]
    assert "Nemenyi critical difference" in md and "](cd_accuracy.png)" in md
    csv = pd.read_csv(tmp_path / "five" / "aggregate.csv")
    assert set(csv["row"]) == set(rows) and "average_rank" in csv.columns


def test_an_unknown_reference_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="reference: 'fedprox' is not a row"):
        aggregate_section(_runs(2, {"fedavg": 0.0}), "fedprox", tmp_path)


def test_rows_missing_a_setting_are_left_out_of_the_section(tmp_path):
    runs = _runs(2, {"fedavg": 0.0, "fedprox": 0.01, "craft": 0.02})
    runs = runs[~((runs["row"] == "craft") & (runs["alpha"] > 0.15))]  # craft: alpha 0.1 only
    assert agg.complete_rows(runs) == ["fedavg", "fedprox"]
    md, files = aggregate_section(runs, "fedavg", tmp_path, reps=100, metrics=("accuracy",))
    assert "left out: craft." in md and "| craft |" not in md and "| fedprox | 6 | 2 |" in md
    md, files = aggregate_section(runs, "craft", tmp_path / "ref", reps=100)
    assert files == [] and "No aggregate: the reference craft did not run in every setting" in md
