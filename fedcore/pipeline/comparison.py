"""A comparison table over seeds: intervals per row, paired tests against a reference row and
against the best row, Holm-adjusted over the table (the statistics are
:mod:`fedcore.pipeline.stats`).

Input: one line per run with ``row`` (what is compared: a method at its settings), ``dataset``,
``alpha``, ``seed`` and the metric columns. Rows are compared only with rows of the same
(dataset, alpha), on the seeds both have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedcore.pipeline.stats import Comparison, compare, holm, mean_interval, paired_seeds

SETTING = ["dataset", "alpha"]
# metric column -> whether higher is better (the metrics a table tests against its reference)
TESTED = {"accuracy": True, "worst10": True}


@dataclass(frozen=True)
class RowTest:
    """One row's paired comparison on one metric (``against``: the other row's label)."""

    row: str
    dataset: str
    alpha: float
    metric: str
    against: str
    comparison: Comparison


def with_intervals(runs: pd.DataFrame, metrics: Sequence[str], keys: Sequence[str]) -> pd.DataFrame:
    """Per group of ``keys``: ``seeds`` and, per metric, ``<m>_mean``, ``<m>_low``, ``<m>_high``
    (95 % t-interval over seeds; NaN bounds with one seed) and ``<m>_n`` (seeds with a value)."""
    out = []
    for key, group in runs.groupby(list(keys), sort=False, dropna=False):
        line = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        line["seeds"] = int(group["seed"].nunique())
        for m in metrics:
            iv = mean_interval(list(group[m].astype(float)))
            line.update({f"{m}_mean": iv.mean, f"{m}_low": iv.low, f"{m}_high": iv.high,
                         f"{m}_n": iv.n})
        out.append(line)
    return pd.DataFrame(out)


def _by_seed(runs: pd.DataFrame, row: str, metric: str) -> dict[int, float]:
    sub = runs[(runs["row"] == row) & runs[metric].notna()]
    return {int(s): float(v) for s, v in zip(sub["seed"], sub[metric], strict=True)}


def reference_rows(runs: pd.DataFrame, reference: str) -> dict[tuple[str, float], str]:
    """The reference row of each (dataset, alpha): the row labelled ``reference``, else the one
    row of method ``reference`` (none where that is ambiguous or absent)."""
    out: dict[tuple[str, float], str] = {}
    for (dataset, alpha), sub in runs.groupby(SETTING, sort=False):
        rows = list(dict.fromkeys(sub["row"]))
        if reference in rows:
            out[(dataset, alpha)] = reference
            continue
        of_method = list(dict.fromkeys(sub.loc[sub["method"] == reference, "row"]))
        if len(of_method) == 1:
            out[(dataset, alpha)] = of_method[0]
    return out


def _tests(runs: pd.DataFrame, against: dict[tuple[str, float], str],
           metric: str, higher: bool) -> list[RowTest]:
    tests = []
    for (dataset, alpha), sub in runs.groupby(SETTING, sort=False):
        other = against.get((dataset, alpha))
        if other is None:
            continue
        ref = _by_seed(runs[(runs["dataset"] == dataset) & (runs["alpha"] == alpha)], other,
                       metric)
        for row in dict.fromkeys(sub["row"]):
            if row == other:
                continue
            seeds, mine, theirs = paired_seeds(_by_seed(sub, row, metric), ref)
            if not seeds:
                continue
            tests.append(RowTest(row, dataset, alpha, metric, other,
                                 compare(mine, theirs, higher_is_better=higher)))
    adjusted = holm([t.comparison for t in tests])
    return [RowTest(t.row, t.dataset, t.alpha, t.metric, t.against, c)
            for t, c in zip(tests, adjusted, strict=True)]


def versus_reference(runs: pd.DataFrame, reference: str) -> list[RowTest]:
    """Every row against the reference row of its setting, per tested metric (Holm over the
    table's rows, per metric)."""
    refs = reference_rows(runs, reference)
    return [t for metric, higher in TESTED.items() for t in _tests(runs, refs, metric, higher)]


def versus_best(runs: pd.DataFrame, metric: str = "accuracy") -> tuple[dict[tuple[str, float],
                                                                              str], list[RowTest]]:
    """The best row of each setting by mean ``metric``, and every other row tested against it
    (Holm over the table)."""
    means = runs.groupby([*SETTING, "row"], sort=False)[metric].mean().dropna()
    best: dict[tuple[str, float], str] = {}
    for (dataset, alpha), sub in means.groupby(level=[0, 1], sort=False):
        best[(dataset, alpha)] = str(sub.idxmax()[2])
    return best, _tests(runs, best, metric, TESTED.get(metric, True))


def best_marks(runs: pd.DataFrame, metric: str = "accuracy") -> dict[tuple[str, float, str], str]:
    """``best`` for the best row of each setting, ``≈ best`` for rows the paired test cannot
    tell from it (indistinguishable or untested), ``""`` for rows worse than it."""
    best, tests = versus_best(runs, metric)
    marks = {(d, a, r): "best" for (d, a), r in best.items()}
    for t in tests:
        marks[(t.dataset, t.alpha, t.row)] = "" if t.comparison.verdict == "worse" else "≈ best"
    return marks


def forest_frame(tests: Sequence[RowTest], labels: dict[str, str]) -> pd.DataFrame:
    """The forest plot's input: one line per row test (``labels``: metric -> axis meaning)."""
    columns = ["row", "alpha", "metric", "label", "mean", "low", "high", "verdict", "reference"]
    return pd.DataFrame([{
        "row": t.row, "alpha": t.alpha, "metric": t.metric, "label": labels.get(t.metric, t.metric),
        "mean": t.comparison.difference.mean, "low": t.comparison.difference.low,
        "high": t.comparison.difference.high, "verdict": t.comparison.verdict,
        "reference": t.against,
    } for t in tests], columns=columns)


def half_width(mean: float, low: float, high: float, n: int, fmt: str) -> str:
    """``0.8388 ± 0.0210`` (± half the 95 % interval), ``0.8388 (1 seed)``, or ``—``."""
    if math.isnan(mean):
        return "—"
    if n < 2 or math.isnan(high):
        return f"{mean:{fmt}} ({n} seed)"
    half = float(np.subtract(high, low)) / 2
    half = 0.0 if half <= 1e-9 * abs(mean) else half  # float noise of equal values
    return f"{mean:{fmt}} ± {half:{fmt}}"
