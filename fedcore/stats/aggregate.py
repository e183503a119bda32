"""Across settings: how a row does over every setting a sweep ran, not one setting at a time.

A *setting* is what a sweep varies besides the method: (dataset, alpha) and any ``grid:*``
column. The estimators follow Agarwal et al. (NeurIPS 2021, "Deep reinforcement learning at the
edge of the statistical precipice") and Demšar (JMLR 2006, "Statistical comparisons of
classifiers over multiple data sets"), written here with scipy and a seeded numpy Generator (the
``rliable`` package draws from numpy's global state and is archived):

- the interquartile mean (IQM) of a metric over all of a row's runs, with a stratified bootstrap
  interval: each replicate redraws, within every setting, as many runs as that setting holds,
  with replacement, so every setting keeps its weight;
- the probability of improvement of a row over the reference, P(X > Y): per setting, the chance
  that a run of X beats a run of Y (ties count half), averaged over the settings both ran;
- performance profiles: the fraction of a row's runs above each threshold tau;
- average ranks over settings, and Friedman's test with the Nemenyi critical difference only
  with at least ``MIN_SETTINGS_FOR_CD`` settings.

Every metric here is higher-is-better (accuracies). Pure functions of a runs DataFrame (columns
``row``, ``method``, ``dataset``, ``alpha``, ``seed`` and the metric columns); no MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedcore.core.component.seeding import numpy_rng

CONFIDENCE = 0.95  # of every interval here
REPS = 2000  # bootstrap replicates of every interval
SETTING_BASE = ("dataset", "alpha")  # a setting: these and any grid:* column
METRICS = ("accuracy", "worst10")
LABELS = {"accuracy": "final accuracy", "worst10": "worst-10 % client accuracy"}
# Demšar (2006, sec. 3.2.2) compares methods by their average ranks over data sets and trusts
# the chi-square approximation of Friedman's statistic from about N > 10 data sets and k > 5
# methods (exact tables below that). Over fewer than five settings the average ranks take few
# distinct values and the Nemenyi critical difference exceeds most gaps between them, so the
# diagram is drawn from five settings on, and its p-value read as approximate below ten.
MIN_SETTINGS_FOR_CD = 5
MIN_ROWS_FOR_CD = 3  # Friedman's test compares at least three rows


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap interval, over ``runs`` runs in ``settings``
    settings (``low``/``high`` NaN when there is nothing to resample)."""

    value: float
    low: float
    high: float
    runs: int
    settings: int

    def text(self, fmt: str = ".4f") -> str:
        """``0.9278 [0.9101, 0.9455]`` (or the value alone without an interval)."""
        if math.isnan(self.value):
            return "—"
        if math.isnan(self.low):
            return f"{self.value:{fmt}}"
        return f"{self.value:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


@dataclass(frozen=True)
class RankTest:
    """Average ranks (1 = best) of the rows present in every setting, and, when there are
    enough settings, Friedman's test and the Nemenyi critical difference at ``level``."""

    ranks: pd.Series  # row -> average rank, best first
    settings: int
    statistic: float  # Friedman's chi-square (NaN: not run)
    p: float
    cd: float  # Nemenyi critical difference in average rank (NaN: not computed)
    level: float
    reason: str  # why there is no critical difference ("" when there is one)


# --- settings ---------------------------------------------------------------------------------


def setting_columns(runs: pd.DataFrame) -> list[str]:
    """The columns whose values make a setting: dataset, alpha and every ``grid:*`` column."""
    base = [c for c in SETTING_BASE if c in runs.columns]
    return base + sorted(c for c in runs.columns if str(c).startswith("grid:"))


def setting_labels(runs: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.Series:
    """Each run's setting as text, ``dataset=digits alpha=0.1`` (the run's index kept)."""
    cols = list(setting_columns(runs) if columns is None else columns)
    if not cols:
        return pd.Series("all", index=runs.index, dtype=object)
    parts = [c.removeprefix("grid:") + "=" + runs[c].astype(str) for c in cols]
    label = parts[0]
    for p in parts[1:]:
        label = label + " " + p
    return label.astype(object)


def n_settings(runs: pd.DataFrame, columns: Sequence[str] | None = None) -> int:
    """How many settings ``runs`` span."""
    return int(setting_labels(runs, columns).nunique())


def groups_by_setting(
    runs: pd.DataFrame, row: str, metric: str, columns: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """A row's values of ``metric`` per setting (sorted by setting, then seed; NaN dropped)."""
    sub = runs[runs["row"] == row].assign(_setting=setting_labels(runs, columns))
    sub = sub[sub[metric].notna()].sort_values(["_setting", "seed"], kind="stable")
    return {str(s): g[metric].to_numpy(dtype=float) for s, g in sub.groupby("_setting", sort=True)}


def complete_rows(runs: pd.DataFrame, columns: Sequence[str] | None = None) -> list[str]:
    """The rows with at least one run in every setting the runs span (in order of first
    appearance): the rows an across-settings comparison can pool on equal terms."""
    frame = runs.assign(_setting=setting_labels(runs, columns))
    count = frame.groupby("row", sort=False)["_setting"].nunique()
    total = frame["_setting"].nunique()
    return [r for r in rows_in_order(runs) if count.get(r, 0) == total]


def rows_in_order(runs: pd.DataFrame, reference: str | None = None) -> list[str]:
    """The rows, reference first, then in order of first appearance."""
    rows = list(dict.fromkeys(runs["row"].astype(str)))
    if reference in rows:
        rows.remove(reference)
        rows.insert(0, reference)
    return rows


# --- estimators -------------------------------------------------------------------------------


def interquartile_mean(values: np.ndarray) -> float:
    """The mean of the middle half: ``floor(n/4)`` values cut from each end, the rest averaged
    (``scipy.stats.trim_mean(values, 0.25)``)."""
    return float(interquartile_means(np.asarray(values)[None, :])[0])


def interquartile_means(matrix: np.ndarray) -> np.ndarray:
    """The interquartile mean of each row of ``matrix``."""
    from scipy import stats

    return np.asarray(stats.trim_mean(matrix, 0.25, axis=1))


def stratified_bootstrap(
    groups: Sequence[np.ndarray],
    statistic: Callable[[np.ndarray], np.ndarray],
    rng: np.random.Generator,
    reps: int = REPS,
) -> np.ndarray:
    """``reps`` replicates of ``statistic``: it receives a (reps, total) matrix whose each row
    redraws, within every group in turn, as many values as the group holds, with replacement
    (the draws of one group are ``rng.integers(0, n, (reps, n))``, groups in the order given)."""
    parts = [g[rng.integers(0, len(g), size=(reps, len(g)))] for g in groups]
    return np.asarray(statistic(np.concatenate(parts, axis=1)))


def _percentile(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    return float(low), float(high)


def iqm_estimate(
    groups: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """The IQM of all values in ``groups`` (setting -> values) with its stratified bootstrap
    percentile interval."""
    parts = [v for v in groups.values() if len(v)]
    if not parts:
        return Estimate(math.nan, math.nan, math.nan, 0, 0)
    values = np.concatenate(parts)
    point = float(interquartile_mean(values))
    if len(values) < 2:
        return Estimate(point, math.nan, math.nan, len(values), len(parts))
    reps_iqm = stratified_bootstrap(parts, interquartile_means, rng, reps)
    return Estimate(point, *_percentile(reps_iqm, confidence), len(values), len(parts))


def seed_values(
    runs: pd.DataFrame, row: str, metric: str, columns: Sequence[str] | None = None
) -> dict[str, dict[int, float]]:
    """A row's values of ``metric`` per setting, by seed (NaN dropped)."""
    sub = runs[runs["row"] == row].assign(_setting=setting_labels(runs, columns))
    sub = sub[sub[metric].notna()]
    return {str(s): {int(k): float(v) for k, v in zip(g["seed"], g[metric], strict=True)}
            for s, g in sub.groupby("_setting", sort=True)}


def common_seeds(runs: pd.DataFrame, columns: Sequence[str] | None = None) -> list[int]:
    """The seeds every row ran in every setting the runs span (sorted)."""
    frame = runs.assign(_setting=setting_labels(runs, columns))
    sets = [set(map(int, g["seed"])) for _, g in frame.groupby(["row", "_setting"], sort=False)]
    return sorted(set.intersection(*sets)) if sets else []


def paired_wins(x: np.ndarray, y: np.ndarray) -> np.ndarray | float:
    """The share of seeds on which ``x`` beats ``y`` (aligned by seed), ties counted half;
    matrices (reps, n) give one share per row."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    out = ((xs > ys) + 0.5 * (xs == ys)).mean(axis=-1)
    return float(out) if np.ndim(out) == 0 else np.asarray(out)


def improvement_estimate(
    x: Mapping[str, Mapping[int, float]],
    y: Mapping[str, Mapping[int, float]],
    rng: np.random.Generator,
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """The probability of improvement of X over Y, paired by seed: per setting, the share of the
    seeds both ran on which X beats Y (a seed fixes partition, initial model and client
    sampling for both), averaged over the settings with equal weight; the interval redraws
    the seeds within every setting, the same draw for X and Y."""
    pairs = {}
    for s in sorted(set(x) & set(y)):
        seeds = sorted(set(x[s]) & set(y[s]))
        if seeds:
            pairs[s] = (np.array([x[s][k] for k in seeds]), np.array([y[s][k] for k in seeds]))
    if not pairs:
        return Estimate(math.nan, math.nan, math.nan, 0, 0)
    point = float(np.mean([paired_wins(a, b) for a, b in pairs.values()]))
    runs = sum(len(a) for a, _ in pairs.values())
    if all(len(a) < 2 for a, _ in pairs.values()):
        return Estimate(point, math.nan, math.nan, runs, len(pairs))
    total = np.zeros(reps)
    for a, b in pairs.values():
        pick = rng.integers(0, len(a), size=(reps, len(a)))
        total += np.asarray(paired_wins(a[pick], b[pick]))
    return Estimate(point, *_percentile(total / len(pairs), confidence), runs, len(pairs))


def performance_profile(
    groups: Mapping[str, np.ndarray],
    taus: np.ndarray,
    rng: np.random.Generator,
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """The fraction of all runs whose value exceeds each ``tau`` (columns tau, fraction, low,
    high; the band is the stratified bootstrap percentile interval)."""
    parts = [v for v in groups.values() if len(v)]
    if not parts:
        return pd.DataFrame({"tau": taus, "fraction": np.nan, "low": np.nan, "high": np.nan})
    values = np.concatenate(parts)
    frac = (values[None, :] > taus[:, None]).mean(axis=1)
    boots = stratified_bootstrap(
        parts, lambda m: (m[:, :, None] > taus[None, None, :]).mean(axis=1), rng, reps
    )  # reps x taus
    tail = (1 - confidence) / 2
    low, high = np.quantile(boots, [tail, 1 - tail], axis=0)
    return pd.DataFrame({"tau": taus, "fraction": frac, "low": low, "high": high})


def profile_taus(runs: pd.DataFrame, metric: str, points: int = 101) -> np.ndarray:
    """Thresholds spanning every run's value of ``metric``."""
    v = runs[metric].dropna().to_numpy(dtype=float)
    if not len(v):
        return np.zeros(0)
    return np.linspace(float(v.min()), float(v.max()), points)


# --- ranks ------------------------------------------------------------------------------------


def setting_means(
    runs: pd.DataFrame, metric: str, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """Settings x rows: each row's mean ``metric`` over seeds, only rows present (with a value)
    in every setting."""
    frame = runs.assign(_setting=setting_labels(runs, columns))
    table = frame.groupby(["_setting", "row"], sort=True)[metric].mean().unstack("row")
    order = [r for r in rows_in_order(runs) if r in table.columns]
    return table[order].dropna(axis=1, how="any")


def nemenyi_cd(rows: int, settings: int, level: float = 0.05) -> float:
    """Nemenyi's critical difference of average ranks, q_level sqrt(k (k+1) / (6 N)), with q
    the studentized range quantile over sqrt 2 (Demšar 2006, eq. 5 and table 5)."""
    from scipy import stats

    q = float(stats.studentized_range.ppf(1 - level, rows, np.inf)) / math.sqrt(2)
    return q * math.sqrt(rows * (rows + 1) / (6 * settings))


def rank_test(
    runs: pd.DataFrame,
    metric: str,
    columns: Sequence[str] | None = None,
    level: float = 0.05,
) -> RankTest:
    """Average ranks over settings (rank 1: highest mean in a setting, ties share the average
    rank); Friedman's test and the Nemenyi critical difference only with at least
    ``MIN_SETTINGS_FOR_CD`` settings and ``MIN_ROWS_FOR_CD`` rows."""
    from scipy import stats

    table = setting_means(runs, metric, columns)
    n, k = table.shape
    if n == 0 or k == 0:
        return RankTest(pd.Series(dtype=float), 0, math.nan, math.nan, math.nan, level,
                        "no row ran in every setting")
    ranks = table.apply(lambda r: pd.Series(stats.rankdata(-r.to_numpy()), index=r.index),
                        axis=1)
    avg = ranks.mean(axis=0).sort_values(kind="stable")
    reason = ""
    if n < MIN_SETTINGS_FOR_CD:
        reason = (f"it needs at least {MIN_SETTINGS_FOR_CD} settings (Demšar 2006) and "
                  f"these runs span {n}")
    elif k < MIN_ROWS_FOR_CD:
        reason = (f"Friedman's test needs at least {MIN_ROWS_FOR_CD} rows present in every "
                  f"setting and there are {k}")
    if reason:
        return RankTest(avg, n, math.nan, math.nan, math.nan, level, reason)
    stat, p = stats.friedmanchisquare(*(table[c].to_numpy() for c in table.columns))
    return RankTest(avg, n, float(stat), float(p), nemenyi_cd(k, n, level), level, "")


def cliques(ranks: pd.Series, cd: float) -> list[list[str]]:
    """Maximal runs of rows (in rank order) whose average ranks differ by less than ``cd``:
    the groups a critical-difference diagram joins with a bar (two rows or more)."""
    names, values = list(ranks.index), ranks.to_numpy(dtype=float)
    out: list[list[str]] = []
    for i in range(len(names)):
        j = i
        while j + 1 < len(names) and values[j + 1] - values[i] < cd:
            j += 1
        if j > i and not (out and names.index(out[-1][-1]) >= j):
            out.append(names[i : j + 1])
    return out


# --- the report section -----------------------------------------------------------------------


def summary_table(
    runs: pd.DataFrame,
    reference: str,
    metric: str,
    *,
    columns: Sequence[str] | None = None,
    seed: int = 0,
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """Per row: IQM with its interval, P(row > reference) with its interval (NaN for the
    reference itself), runs and settings. Each estimate draws from its own Generator
    (``numpy_rng(seed, purpose, metric, row)``): the same runs give the same numbers."""
    ref = seed_values(runs, reference, metric, columns)
    records = []
    for row in rows_in_order(runs, reference):
        g = groups_by_setting(runs, row, metric, columns)
        iqm = iqm_estimate(g, numpy_rng(seed, "iqm", metric, row), reps, confidence)
        poi = (Estimate(math.nan, math.nan, math.nan, 0, 0) if row == reference else
               improvement_estimate(seed_values(runs, row, metric, columns), ref,
                                    numpy_rng(seed, "improvement", metric, row), reps,
                                    confidence))
        records.append({
            "row": row, "metric": metric, "runs": iqm.runs, "settings": iqm.settings,
            "iqm": iqm.value, "iqm_low": iqm.low, "iqm_high": iqm.high,
            "p_improvement": poi.value, "p_improvement_low": poi.low,
            "p_improvement_high": poi.high,
        })
    return pd.DataFrame.from_records(records)
