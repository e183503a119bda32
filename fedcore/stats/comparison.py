"""A comparison table over seeds: intervals per row and the reference row of each setting (the
tests are ``fedcore.stats.looks``, the statistics ``fedcore.stats.verdicts``).

Input: one line per run with ``row`` (what is compared: a method at its settings), ``dataset``,
``alpha``, ``seed`` and the metric columns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedcore.stats.intervals import Interval, mean_interval, no_resolution

SETTING = ["dataset", "alpha"]


def canonical(value: Any) -> Any:
    """A grid value as a group key: a mapping or a list as sorted-key JSON (``{"algorithm":
    "fedprox", "mu": 0.1}``: the same string whatever order its keys were typed in), any
    other value as it is."""
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def canonical_keys(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """``runs`` with every mapping or list in its ``keys`` columns made ``canonical``."""
    nested = [k for k in keys
              if runs[k].map(lambda v: isinstance(v, Mapping | list | tuple)).any()]
    return runs.assign(**{k: runs[k].map(canonical) for k in nested}) if nested else runs


def with_intervals(runs: pd.DataFrame, metrics: Sequence[str], keys: Sequence[str],
                   bounds: Mapping[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    """Per group of ``keys``: ``seeds`` and, per metric, ``<m>_mean``, ``<m>_low``, ``<m>_high``
    (95 % t-interval over seeds, cut to the metric's range in ``bounds``; NaN bounds with one
    seed), ``<m>_n`` (seeds with a value) and ``<m>_resolved`` (False where the uncut interval
    spans the whole range)."""
    bounds = bounds or {}
    runs = canonical_keys(runs, keys)
    out = []
    for key, group in runs.groupby(list(keys), sort=False, dropna=False):
        line = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        line["seeds"] = int(group["seed"].nunique())
        for m in metrics:
            raw = mean_interval(list(group[m].astype(float)))
            iv: Interval = raw.clipped(bounds[m]) if m in bounds else raw
            line.update({f"{m}_mean": iv.mean, f"{m}_low": iv.low, f"{m}_high": iv.high,
                         f"{m}_n": iv.n,
                         f"{m}_resolved": m not in bounds or raw.resolves(bounds[m])})
        out.append(line)
    return pd.DataFrame(out)


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


def half_width(mean: float, low: float, high: float, n: int, fmt: str,
               resolved: bool = True) -> str:
    """``0.8388 ± 0.0210`` (± half the 95 % interval), ``0.9800 [0.9512, 1.0000]`` (an interval
    cut at the metric's range, no longer symmetric), ``0.5000 (no resolution at n = 3)``,
    ``0.8388 (1 seed)``, or ``—``."""
    if math.isnan(mean):
        return "—"
    if n < 2 or math.isnan(high):
        return f"{mean:{fmt}} ({n} seed)"
    if not resolved:
        return f"{mean:{fmt}} ({no_resolution(n)})"
    if abs((high - mean) - (mean - low)) > 1e-9 * max(1.0, abs(mean)):  # cut at the range
        return f"{mean:{fmt}} [{low:{fmt}}, {high:{fmt}}]"
    half = float(np.subtract(high, low)) / 2
    half = 0.0 if half <= 1e-9 * abs(mean) else half  # float noise of equal values
    return f"{mean:{fmt}} ± {half:{fmt}}"
