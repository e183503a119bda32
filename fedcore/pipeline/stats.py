"""Statistics over seeds: intervals, paired comparisons, Holm correction and seeds needed.

The test is the paired t-test on per-seed differences (``scipy.stats.ttest_rel``). Seeds pair
runs: the same seed gives two methods the same partition, initial model, client sampling and
batch order, so the per-seed difference removes what the seed shares. A rank or sign test would
make no normality assumption, but with the 3-5 seeds a CPU sweep affords it cannot reach 5 %
(Wilcoxon's smallest two-sided p is 1/4 with 3 pairs and 1/16 with 5); the t-test can, at the
price of assuming roughly normal differences. p-values of one table are Holm-adjusted
(``statsmodels.stats.multitest.multipletests``); the seeds an indistinguishable pair would need
come from the observed paired effect size (``statsmodels.stats.power.TTestPower``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

LEVEL = 0.05  # two-sided significance level of every verdict
CONFIDENCE = 0.95  # of every interval
POWER = 0.8  # of the seeds-needed estimate
VERDICTS = ("better", "worse", "indistinguishable", "no test")


@dataclass(frozen=True)
class Interval:
    """Mean over seeds with its two-sided t-interval (``low``/``high`` NaN below 2 seeds)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self, fmt: str = ".4f") -> str:
        """``0.9278 [0.9101, 0.9455]``, or ``0.9278 (1 seed, no interval)``."""
        if self.n < 2:
            return f"{self.mean:{fmt}} ({self.n} seed, no interval)"
        return f"{self.mean:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean and Student-t interval of ``values`` (one per seed); NaN values are dropped."""
    from scipy import stats

    x = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, 1)
    sem = float(stats.sem(x))
    if sem == 0.0:
        return Interval(mean, mean, mean, n)
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high), n)


@dataclass(frozen=True)
class Comparison:
    """``values`` against ``reference`` on the same seeds.

    ``difference``: mean of (values - reference) with its interval; ``p``: the paired t-test's
    two-sided p-value, ``p_adjusted`` after Holm over the comparisons of one table (equal to
    ``p`` until [`holm`][fedcore.pipeline.stats.holm]); ``seeds_needed``: for an indistinguishable
    pair, the seeds a paired t-test would need for 80 % power at 5 % if the observed effect were
    real (None: no observed difference, so no number of seeds would tell it apart).
    """

    difference: Interval
    p: float
    p_adjusted: float
    verdict: str
    seeds_needed: int | None
    higher_is_better: bool
    differences: tuple[float, ...]

    @property
    def n(self) -> int:
        return self.difference.n

    def text(self, fmt: str = "+.4f") -> str:
        """``+0.0123 [-0.0040, +0.0286], p=0.21 (Holm), indistinguishable (~14 seeds)``."""
        d = self.difference
        if self.verdict == "no test":
            return f"{d.mean:{fmt}} ({d.n} seed, no test)"
        need = ""
        if self.verdict == "indistinguishable":
            need = f" (~{self.seeds_needed} seeds)" if self.seeds_needed else " (no difference)"
        return (f"{d.mean:{fmt}} [{d.low:{fmt}}, {d.high:{fmt}}], p={self.p_adjusted:.2g}, "
                f"{self.verdict}{need}")


def paired_seeds(
    values: Mapping[int, float], reference: Mapping[int, float]
) -> tuple[list[int], list[float], list[float]]:
    """The seeds both have (sorted), with both sides' values on them: the pairing of a test."""
    seeds = sorted(set(values) & set(reference))
    return seeds, [values[s] for s in seeds], [reference[s] for s in seeds]


def _verdict(mean: float, p: float, n: int, higher_is_better: bool, level: float) -> str:
    if n < 2 or math.isnan(p):
        return "no test"
    if p >= level:
        return "indistinguishable"
    return "better" if (mean > 0) == higher_is_better else "worse"


def seeds_needed(differences: Sequence[float], level: float = LEVEL,
                 power: float = POWER) -> int | None:
    """Seeds a two-sided paired t-test needs to detect the observed mean difference with
    ``power`` at ``level`` (Cohen's d from the observed paired differences); None when the
    observed mean difference is 0."""
    from statsmodels.stats.power import TTestPower

    d = np.asarray(differences, dtype=float)
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if len(d) > 1 else math.nan
    if mean == 0.0 or math.isnan(sd):
        return None
    if sd <= 1e-12 * max(1.0, abs(mean)):
        return 2
    effect = abs(mean) / sd
    with warnings.catch_warnings(record=True):  # its root finder warns as it gives up on tiny
        warnings.simplefilter("always")  # effects: recorded here, answered below
        n = float(np.asarray(TTestPower().solve_power(
            effect_size=effect, alpha=level, power=power, alternative="two-sided")).item())
    if not math.isfinite(n):  # a tiny effect: the normal approximation (n is large anyway)
        from scipy.stats import norm

        n = ((norm.ppf(1 - level / 2) + norm.ppf(power)) / effect) ** 2 + 2
    return max(2, math.ceil(n))


def compare(values: Sequence[float], reference: Sequence[float], higher_is_better: bool = True,
            level: float = LEVEL) -> Comparison:
    """Paired t-test of ``values`` against ``reference`` (the same seeds, in the same order).

    Differences that are equal on every seed have no spread: p is 1 when they are all 0 and
    0 otherwise (the same difference on every seed).
    """
    from scipy import stats

    if len(values) != len(reference):
        raise ValueError(f"paired values need the same seeds ({len(values)} vs {len(reference)})")
    diffs = np.asarray(values, dtype=float) - np.asarray(reference, dtype=float)
    if np.isnan(diffs).any():
        raise ValueError("paired values contain NaN")
    interval = mean_interval(list(diffs))
    n = len(diffs)
    if n < 2:
        p = math.nan
    elif float(diffs.std(ddof=1)) <= 1e-12 * max(1.0, abs(interval.mean)):
        p = 1.0 if interval.mean == 0.0 else 0.0
    else:
        p = float(stats.ttest_rel(values, reference).pvalue)
    verdict = _verdict(interval.mean, p, n, higher_is_better, level)
    need = seeds_needed(diffs, level) if verdict == "indistinguishable" else None
    return Comparison(interval, p, p, verdict, need, higher_is_better, tuple(map(float, diffs)))


def holm(comparisons: Sequence[Comparison], level: float = LEVEL) -> list[Comparison]:
    """The comparisons of one table with Holm-adjusted p-values and verdicts from them."""
    from statsmodels.stats.multitest import multipletests

    tested = [i for i, c in enumerate(comparisons) if not math.isnan(c.p)]
    out = list(comparisons)
    if not tested:
        return out
    adjusted = multipletests([comparisons[i].p for i in tested], alpha=level, method="holm")[1]
    for i, p in zip(tested, adjusted, strict=True):
        c = comparisons[i]
        verdict = _verdict(c.difference.mean, float(p), c.n, c.higher_is_better, level)
        need = seeds_needed(c.differences, level) if verdict == "indistinguishable" else None
        out[i] = replace(c, p_adjusted=float(p), verdict=verdict, seeds_needed=need)
    return out
