"""Statistics over seeds: intervals, paired comparisons with four outcomes, Holm within a family.

A comparison pairs two rows on the seeds both have (a seed fixes partition, initial model, client
sampling and batch order for every method) and tests the per-seed differences:

- **better / worse**: the two-sided paired t-test (``scipy.stats.ttest_rel``) rejects "no
  difference" at the level the family gives this comparison;
- **equivalent**: two one-sided tests (TOST, ``statsmodels`` ``ttost_paired``) reject "the
  difference is at least the margin" at that level;
- **undecided**: neither, with the smallest difference the comparison could detect at its n.

Differences that are equal on every seed have no spread, so no t statistic: their p-value is the
exact sign-flip test's (``2 / 2**n`` two-sided for a non-zero constant, ``1`` for all zeros),
never 0. Rank and sign tests need no normality but cannot reach 5 % with 3-5 seeds; the t-test
can, at the price of assuming roughly normal differences (docs/explanation/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedcore.specs.families import LEVEL, MARGIN
from fedcore.stats.intervals import (
    UNBOUNDED,
    Interval,
    is_flat,
    mean_interval,
    mean_sd,
    no_resolution,
)
from fedcore.stats.paired import detectable_difference, equivalence_p, superiority_p

VERDICTS = ("better", "worse", "equivalent", "undecided", "no test")


@dataclass(frozen=True)
class Comparison:
    """One row against its family's reference on the same seeds (difference = reference - row
    for a family; ``values - reference`` for ``compare``).

    ``interval``: the mean difference with its t-interval at ``1 - level`` (the level the
    family's correction gave this comparison, so that the interval excludes 0 exactly when the
    verdict is better or worse); ``p``: the two-sided paired p-value; ``p_equivalence``: TOST's;
    ``detectable``: the smallest difference this comparison detects at its n and level with 80 %
    power (from the observed spread).
    """

    interval: Interval
    p: float
    p_equivalence: float
    level: float
    verdict: str
    higher_is_better: bool
    differences: tuple[float, ...]
    margin: float = MARGIN
    detectable: float = math.nan
    tost: Interval | None = None  # the (1 - 2a) interval of TOST at its Holm level a
    equivalence_level: float = LEVEL  # a: the level Holm gave the equivalence test
    bounds: tuple[float, float] = UNBOUNDED  # the range of a difference of the metric

    @property
    def n(self) -> int:
        return self.interval.n

    @property
    def difference(self) -> Interval:
        return self.interval

    @property
    def shown(self) -> Interval:
        """The interval a table prints: TOST's (1 - 2a) one for an ``equivalent`` verdict, else
        the superiority-level one, either cut to the range of a difference."""
        iv = self.tost if self.verdict == "equivalent" and self.tost is not None else self.interval
        return iv.clipped(self.bounds)

    @property
    def resolved(self) -> bool:
        """Whether n resolves the range: the interval does not span all of it and, undecided,
        the detectable difference is smaller than the range's half-width."""
        half = (self.bounds[1] - self.bounds[0]) / 2
        big = (self.verdict == "undecided" and math.isfinite(self.detectable)
               and self.detectable >= half)
        return self.interval.resolves(self.bounds) and not big

    @property
    def fragile(self) -> bool:
        """Whether the verdict sits on a hair: the p-value that decided it (or, undecided, that
        nearly did) lies within ``FRAGILE`` (10 %) of its Holm threshold."""
        sup = _near(self.p, self.level)
        eq = _near(self.p_equivalence, self.equivalence_level)
        if self.verdict in ("better", "worse"):
            return sup
        if self.verdict == "equivalent":
            return eq
        return self.verdict == "undecided" and (sup or eq)

    def fragile_text(self) -> str:
        """`` (fragile: p = 0.00354 against 0.00357)`` for a fragile verdict, else ""."""
        if not self.fragile:
            return ""
        p, a = ((self.p_equivalence, self.equivalence_level)
                if self.verdict == "equivalent" or not _near(self.p, self.level)
                else (self.p, self.level))
        return f" (fragile: p = {p:.3g} against {a:.3g})"

    def span(self, fmt: str = "+.4f") -> str:
        """``[-0.0040, +0.0286]`` (the shown interval), ``(equal on every seed)`` or ``(no
        resolution at n = 3)``."""
        d = self.shown
        if math.isnan(d.low):
            return "(equal on every seed)"
        if not self.resolved:
            return f"({no_resolution(self.n)})"
        return f"[{d.low:{fmt}}, {d.high:{fmt}}]"

    def text(self, fmt: str = "+.4f") -> str:
        """``+0.0123 [-0.0040, +0.0286], undecided (detects ±0.031)``; an ``equivalent``
        verdict shows its TOST interval, ``... equivalent within ±0.01 (TOST 90 %)``."""
        d = self.interval
        if self.verdict == "no test":
            return f"{d.mean:{fmt}} ({d.n} seed, no test)"
        extra = ""
        if self.verdict == "equivalent":
            extra = f" within ±{self.margin:g}{self.tost_label()}"
        elif self.verdict == "undecided" and math.isfinite(self.detectable) and self.resolved:
            extra = f" (detects ±{self.detectable:.2g})"
        return f"{d.mean:{fmt}} {self.span(fmt)}, {self.verdict}{extra}"

    def tost_label(self) -> str:
        """`` (TOST 90 % interval)``: which interval an equivalent verdict shows."""
        if self.tost is None or math.isnan(self.tost.low):
            return ""
        return f" (TOST {100 * (1 - 2 * self.equivalence_level):.3g} % interval)"


FRAGILE = 0.1  # a p-value within this fraction of its threshold marks the verdict fragile


def _near(p: float, threshold: float) -> bool:
    """``p`` within ``FRAGILE`` of ``threshold`` (relative)."""
    return math.isfinite(p) and abs(p - threshold) <= FRAGILE * threshold


def _verdict(mean: float, sup: bool, eq: bool, n: int, higher_is_better: bool) -> str:
    if n < 2:
        return "no test"
    if sup:
        return "better" if (mean > 0) == higher_is_better else "worse"
    return "equivalent" if eq else "undecided"


def _build(diffs: np.ndarray, level: float, sup: bool, eq: bool, higher_is_better: bool,
           margin: float, p: float, p_eq: float, eq_level: float = LEVEL,
           bounds: tuple[float, float] = UNBOUNDED) -> Comparison:
    n = len(diffs)
    if n >= 2 and is_flat(diffs):
        interval = Interval(float(diffs.mean()), math.nan, math.nan, n)
        tost = interval
    else:
        interval = mean_interval(list(diffs), 1 - level)
        tost = mean_interval(list(diffs), 1 - 2 * eq_level)
    sd = mean_sd(diffs)[1] if n > 1 else math.nan
    return Comparison(interval, p, p_eq, level,
                      _verdict(interval.mean, sup, eq, n, higher_is_better), higher_is_better,
                      tuple(map(float, diffs)), margin, detectable_difference(sd, n, level),
                      tost, eq_level, bounds)


def compare(values: Sequence[float], reference: Sequence[float], higher_is_better: bool = True,
            level: float = LEVEL, margin: float = MARGIN,
            bounds: tuple[float, float] = UNBOUNDED) -> Comparison:
    """``values`` against ``reference`` (the same seeds, in the same order), alone at ``level``;
    ``bounds``: the range of a difference of the metric (intervals are cut to it)."""
    return family_test([values], [reference], higher_is_better, level, margin,
                       bounds=bounds)[0]


def family_test(values: Sequence[Sequence[float]], references: Sequence[Sequence[float]],
                higher_is_better: bool = True, level: float = LEVEL, margin: float = MARGIN,
                decided: Sequence[str | None] | None = None,
                bounds: tuple[float, float] = UNBOUNDED) -> list[Comparison]:
    """Paired comparisons of one family, each ``values[i] - references[i]``, with Holm's
    step-down over the family at ``level``, separately for better/worse and for equivalence.

    ``decided[i]``: a verdict reached at an earlier look (the row no longer runs): better/worse
    count as already rejected in the better/worse step-down and never as equivalent; equivalent
    the reverse; such rows keep that verdict and are not retested. ``"blocked"`` (a failed
    seed) counts in the family but is never rejected. Each comparison's interval is
    at ``1 - a`` where ``a`` is the Holm level of its step (rejected) or the level at which the
    step-down stopped (not rejected), so it excludes 0 exactly when the verdict is better/worse.
    """
    m = len(values)
    if len(references) != m:
        raise ValueError("one reference sequence per compared row")
    decided = list(decided) if decided is not None else [None] * m
    diffs = []
    for v, r in zip(values, references, strict=True):
        if len(v) != len(r):
            raise ValueError(f"paired values need the same seeds ({len(v)} vs {len(r)})")
        d = np.asarray(v, dtype=float) - np.asarray(r, dtype=float)
        if np.isnan(d).any():
            raise ValueError("paired values contain NaN")
        diffs.append(d)
    testable = [i for i in range(m) if len(diffs[i]) >= 2]
    p_sup = {i: superiority_p(diffs[i]) for i in testable}
    p_eq = {i: equivalence_p(diffs[i], margin) for i in testable}
    prior_sup = {i for i in range(m) if decided[i] in ("better", "worse")}
    prior_eq = {i for i in range(m) if decided[i] == "equivalent"}
    out_of_play = {i for i in range(m) if decided[i] == "blocked"}  # counted, never rejected
    sup_level, sup = _holm({i: (0.0 if i in prior_sup else 1.0 if i in prior_eq | out_of_play
                                else p_sup[i]) for i in testable}, level)
    eq_level, eq = _holm({i: (0.0 if i in prior_eq else 1.0 if i in prior_sup | out_of_play
                       else p_eq[i]) for i in testable}, level)
    out = []
    for i in range(m):
        if i not in testable:
            out.append(_build(diffs[i], level, False, False, higher_is_better, margin,
                              math.nan, math.nan, bounds=bounds))
            continue
        a = sup_level[i]
        out.append(_build(diffs[i], a, i in sup, i in eq and i not in sup, higher_is_better,
                          margin, p_sup[i], p_eq[i], eq_level[i], bounds))
    return out


def _holm(p: dict[int, float], level: float) -> tuple[dict[int, float], set[int]]:
    """Holm's step-down at ``level`` over ``p`` (index -> p-value): the level each index was
    judged at and the rejected indices."""
    order = sorted(p, key=lambda i: (p[i], i))
    m = len(order)
    at: dict[int, float] = {}
    rejected: set[int] = set()
    stop = None
    for step, i in enumerate(order):
        a = level / (m - step)
        if stop is None and p[i] <= a:
            rejected.add(i)
            at[i] = a
        else:
            stop = a if stop is None else stop
            at[i] = stop
    return at, rejected
