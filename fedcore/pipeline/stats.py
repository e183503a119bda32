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

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.05  # family-wise error of every family's verdicts
CONFIDENCE = 0.95  # of every per-row interval
POWER = 0.8  # of the detectable-difference and seeds-for figures
MARGIN = 0.01  # default equivalence margin (accuracy points / 100)
VERDICTS = ("better", "worse", "equivalent", "undecided", "no test")
DIFFERENCE_RANGE = (-1.0, 1.0)  # a difference of two accuracies (every endpoint is one)
VALUE_RANGE = (0.0, 1.0)  # an accuracy
UNBOUNDED = (-math.inf, math.inf)  # a metric without a range (rounds, bytes)
_FLAT = 1e-12  # relative spread below which differences count as equal on every seed


@dataclass(frozen=True)
class Interval:
    """Mean over seeds with its two-sided t-interval (``low``/``high`` NaN below 2 seeds or when
    every value is equal and the interval is not defined by a t distribution)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self, fmt: str = ".4f") -> str:
        """``0.9278 [0.9101, 0.9455]``, or ``0.9278 (1 seed, no interval)``."""
        if self.n < 2:
            return f"{self.mean:{fmt}} ({self.n} seed, no interval)"
        if math.isnan(self.low):
            return f"{self.mean:{fmt}} (equal on every seed)"
        return f"{self.mean:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"

    def excludes(self, value: float) -> bool:
        """Whether the interval lies wholly above or below ``value`` (False without one)."""
        return not math.isnan(self.low) and (self.low > value or self.high < value)

    def clipped(self, bounds: tuple[float, float]) -> Interval:
        """The interval cut to the metric's range ``bounds`` (a t-interval on 3-5 seeds can
        reach past it; what lies outside is impossible, so cutting it loses no coverage)."""
        if math.isnan(self.low):
            return self
        return Interval(self.mean, max(self.low, bounds[0]), min(self.high, bounds[1]), self.n)

    def resolves(self, bounds: tuple[float, float]) -> bool:
        """False when the unclipped interval covers the metric's whole range: at this n the
        data say nothing about where in the range the value lies."""
        return math.isnan(self.low) or not (self.low <= bounds[0] and self.high >= bounds[1])


def no_resolution(n: int) -> str:
    """What a table prints where an interval or detectable difference would span the range."""
    return f"no resolution at n = {n}"


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean and Student-t interval of ``values`` (one per seed); NaN values are dropped."""
    from scipy.special import stdtrit

    x = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean, sd = _mean_sd(x)
    if n < 2:
        return Interval(mean, math.nan, math.nan, 1)
    sem = sd / math.sqrt(n)
    if sem <= _FLAT * max(1.0, abs(mean)):
        return Interval(mean, mean, mean, n)
    half = float(stdtrit(n - 1, 0.5 + confidence / 2)) * sem  # = scipy.stats.t.interval
    return Interval(mean, mean - half, mean + half, n)


def paired_seeds(
    values: Mapping[int, float], reference: Mapping[int, float]
) -> tuple[list[int], list[float], list[float]]:
    """The seeds both have (sorted), with both sides' values on them: the pairing of a test."""
    seeds = sorted(set(values) & set(reference))
    return seeds, [values[s] for s in seeds], [reference[s] for s in seeds]


def _mean_sd(diffs: np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (plain Python: these are 2-20 numbers)."""
    x = diffs.tolist()
    n = len(x)
    mean = math.fsum(x) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else math.nan
    return mean, sd


def is_flat(diffs: np.ndarray) -> bool:
    """Equal on every seed (to float noise): no t statistic exists."""
    if len(diffs) < 2:
        return False
    mean, sd = _mean_sd(diffs)
    return sd <= _FLAT * max(1.0, abs(mean))


def sign_flip_p(diffs: np.ndarray, shift: float = 0.0, alternative: str = "two-sided") -> float:
    """Exact sign-flip (permutation) p-value of mean(diffs - shift) under symmetry about 0.

    Enumerates all ``2**n`` sign patterns (n <= 16); used where differences have no spread, where
    it gives ``2 / 2**n`` (two-sided) for a constant non-zero difference.
    """
    d = np.asarray(diffs, dtype=float) - shift
    n = len(d)
    if n > 16:
        raise ValueError(f"sign_flip_p enumerates 2**n patterns; n={n} > 16")
    signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
    means = (signs * d).mean(axis=1)
    observed = float(d.mean())
    tol = 1e-12 * max(1.0, abs(observed))
    if alternative == "greater":
        return float(np.mean(means >= observed - tol))
    if alternative == "less":
        return float(np.mean(means <= observed + tol))
    return float(np.mean(np.abs(means) >= abs(observed) - tol))


def superiority_p(diffs: np.ndarray) -> float:
    """Two-sided p-value of "mean difference 0": paired t-test, or the exact sign-flip test when
    the differences are equal on every seed."""
    from scipy.special import stdtr

    if is_flat(diffs):
        return 1.0 if float(diffs.mean()) == 0.0 else sign_flip_p(diffs)
    n = len(diffs)
    mean, sd = _mean_sd(diffs)
    return float(2 * stdtr(n - 1, -abs(mean / (sd / math.sqrt(n)))))  # = ttest_rel's p


def equivalence_p(diffs: np.ndarray, margin: float) -> float:
    """TOST p-value of "|mean difference| >= margin" (the larger of the two one-sided t-tests'
    p-values, as ``statsmodels`` ``ttost_paired`` computes it), or the exact sign-flip version
    when the differences are equal on every seed."""
    from scipy.special import stdtr

    if margin <= 0:
        return 1.0
    if is_flat(diffs):
        lower = sign_flip_p(diffs, -margin, "greater")
        upper = sign_flip_p(diffs, margin, "less")
        return max(lower, upper) if abs(float(diffs.mean())) < margin else 1.0
    n = len(diffs)
    mean, sd = _mean_sd(diffs)
    se = sd / math.sqrt(n)
    lower = stdtr(n - 1, -(mean + margin) / se)  # H0: mean <= -margin
    upper = stdtr(n - 1, (mean - margin) / se)  # H0: mean >= +margin
    return float(max(lower, upper))


def detectable_difference(sd: float, n: int, level: float, power: float = POWER) -> float:
    """The smallest true mean difference a two-sided paired t-test at ``level`` detects with
    ``power`` on ``n`` seeds, for paired differences of standard deviation ``sd`` (NaN below 2
    seeds or without a spread estimate)."""
    if n < 2 or not math.isfinite(sd) or sd <= 0:
        return math.nan
    return detectable_effect(n, level, power) * sd


@functools.lru_cache(maxsize=4096)
def paired_power(effect: float, n: int, level: float) -> float:
    """Power of a two-sided paired t-test at ``level`` on ``n`` seeds against the paired effect
    size ``effect`` (mean / sd of the differences): P(|T| > t_crit) for T noncentral t; where
    scipy's noncentral t returns NaN (e.g. effect 5.0 at n = 3), the same probability
    integrated over the chi-squared V of T = (Z + effect sqrt(n)) / sqrt(V / (n - 1))."""
    from scipy import integrate, stats

    df = n - 1
    crit = float(stats.t.ppf(1 - level / 2, df))
    shift = effect * math.sqrt(n)

    def given(v: float) -> float:
        bar = crit * math.sqrt(v / df)
        tails = stats.norm.sf(bar - shift) + stats.norm.cdf(-bar - shift)
        return float(tails * stats.chi2.pdf(v, df))

    exact = float(stats.nct.sf(crit, df, shift) + stats.nct.cdf(-crit, df, shift))
    if math.isfinite(exact) and 0.0 <= exact <= 1.0:
        return exact
    spread = 50 * math.sqrt(2 * df) + 50  # V's mass lies within this of its mean df
    value, _ = integrate.quad(given, max(0.0, df - spread), df + spread, limit=400,
                              epsabs=1e-12)
    return float(value)


@functools.lru_cache(maxsize=4096)
def detectable_effect(n: int, level: float, power: float = POWER) -> float:
    """The paired effect size that a two-sided paired t-test at ``level`` detects with
    ``power`` on ``n`` seeds: the root of the power function, bracketed (statsmodels'
    ``solve_power`` returned unconverged values silently, e.g. power 0.61 instead of 0.8 at
    n = 3 and level 0.0125); inf below 2 seeds."""
    from scipy.optimize import brentq

    if n < 2:
        return math.inf
    high = 1.0
    while paired_power(high, n, level) < power:
        high *= 2
        if high > 1e9:
            return math.inf
    return float(brentq(lambda e: paired_power(e, n, level) - power, 0.0, high, xtol=1e-12))


def seeds_for(difference: float, sd: float, level: float, power: float = POWER) -> int | None:
    """The fewest seeds (at least 2) with which a two-sided paired t-test at ``level`` detects
    ``difference`` with ``power`` when paired differences have standard deviation ``sd`` (a
    pilot's estimate), counted on the power function; None when either is not positive."""
    from scipy.stats import norm

    if not (difference > 0 and sd > 0 and math.isfinite(sd)):
        return None
    effect = difference / sd
    normal = float((norm.ppf(1 - level / 2) + norm.ppf(power)) / effect) ** 2  # below the t
    n: int = max(2, math.floor(normal))
    if n > 1_000_000:
        return n
    while paired_power(effect, n, level) < power and n < 2 * normal + 100:
        n += 1
    return n


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
    sd = _mean_sd(diffs)[1] if n > 1 else math.nan
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
