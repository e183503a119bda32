"""The report's ranking per setting (fedcore.report.ranking): one table per setting, rows
ordered by the primary endpoint, with n, interval and training state."""

from __future__ import annotations

import math

import pandas as pd

from fedcore.report.ranking import ranking_markdown, setting_columns, setting_title


def _table(lines):
    rows = []
    for row, dataset, alpha, mean, n, extra in lines:
        rows.append({"row": row, "method": row.split()[0], "hparams": "paper", "tuning": "",
                     "dataset": dataset, "alpha": alpha, "seeds": n, "failed": extra.get(
                         "failed", 0), "accuracy_last_k_mean": mean,
                     "accuracy_last_k_low": mean - 0.01, "accuracy_last_k_high": mean + 0.01,
                     "accuracy_last_k_n": n, "accuracy_last_k_resolved": True,
                     "training": extra.get("training", "plateaued (+0.001)"),
                     **{k: v for k, v in extra.items() if k.startswith("grid:")}})
    return pd.DataFrame(rows)


def _ranked(section, title):
    block = section.split(f"### {title}\n\n")[1].split("\n\n")[0]
    return [line.split(" | ") for line in block.splitlines()[2:]]


def test_each_setting_orders_its_rows_by_the_endpoint_best_first():
    table = _table([("fedavg", "digits", 0.1, 0.80, 3, {}),
                    ("craft", "digits", 0.1, 0.85, 3, {"training": "climbing (+0.020 ± 0.004 "
                                                       "between the last two windows of 5 "
                                                       "evaluations)"}),
                    ("fedprox", "digits", 0.1, math.nan, 0, {"failed": 3}),
                    ("scaffold", "digits", 0.1, 0.85, 2, {"failed": 1}),
                    ("fedavg", "digits", 1.0, 0.90, 3, {}),
                    ("craft", "digits", 1.0, 0.70, 3, {})])
    md = ranking_markdown(table, "accuracy_last_k", "mean test accuracy of the last 5")
    assert md.startswith("## Ranking per setting") and "not a test" in md
    low = _ranked(md, "digits, Dirichlet 0.1")
    assert [r[1] for r in low] == ["craft", "scaffold", "fedavg", "fedprox"]
    assert [r[0] for r in low] == ["| 1", "| 1", "| 3", "| —"]  # equal means share a place
    assert low[0][3:7] == ["3", "0.8500", "[0.8400, 0.8600]", "climbing (+0.020 ± 0.004) |"]
    assert low[1][3] == "2 (+1 failed)" and low[3][3:5] == ["0 (+3 failed)", "—"]
    high = _ranked(md, "digits, Dirichlet 1")
    assert [r[1] for r in high] == ["fedavg", "craft"]
    assert max(map(len, md.splitlines()[3:])) < 250


def test_lower_is_better_reverses_the_order():
    table = _table([("a", "digits", 0.1, 5.0, 3, {}), ("b", "digits", 0.1, 3.0, 3, {})])
    md = ranking_markdown(table, "accuracy_last_k", "rounds", higher=False)
    assert [r[1] for r in _ranked(md, "digits, Dirichlet 0.1")] == ["b", "a"]


def test_a_varied_setting_splits_the_ranking_but_a_method_key_does_not():
    table = _table([("fedavg rounds=10", "digits", 0.1, 0.7, 3,
                     {"grid:rounds": 10, "grid:method.mu": ""}),
                    ("fedprox rounds=10 mu=0.1", "digits", 0.1, 0.75, 3,
                     {"grid:rounds": 10, "grid:method.mu": 0.1}),
                    ("fedavg rounds=20", "digits", 0.1, 0.8, 3,
                     {"grid:rounds": 20, "grid:method.mu": ""})])
    assert setting_columns(table) == ["dataset", "alpha", "grid:rounds"]
    md = ranking_markdown(table, "accuracy_last_k", "acc")
    assert [r[1] for r in _ranked(md, "digits, Dirichlet 0.1, rounds=10")] == [
        "fedprox rounds=10 mu=0.1", "fedavg rounds=10"]
    assert [r[1] for r in _ranked(md, "digits, Dirichlet 0.1, rounds=20")] == [
        "fedavg rounds=20"]


def test_a_protocol_column_is_a_setting_and_blank_values_are_left_out_of_titles():
    table = _table([("fedavg", "digits", 0.1, 0.7, 3, {})]).assign(protocol="fedlf")
    assert setting_columns(table) == ["dataset", "alpha", "protocol"]
    assert setting_title(["dataset", "alpha", "protocol", "grid:x"],
                         ("digits", 0.1, "fedlf", "")) == "digits, Dirichlet 0.1, protocol=fedlf"
    assert ranking_markdown(table.iloc[:0], "accuracy_last_k", "acc") == ""
