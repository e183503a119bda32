"""Means over seeds with their Student-t intervals, and the pairing of two rows on their seeds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95  # of every per-row interval
DIFFERENCE_RANGE = (-1.0, 1.0)  # a difference of two accuracies (every endpoint is one)
VALUE_RANGE = (0.0, 1.0)  # an accuracy
UNBOUNDED = (-math.inf, math.inf)  # a metric without a range (rounds, bytes)
FLAT = 1e-12  # relative spread below which differences count as equal on every seed


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
    mean, sd = mean_sd(x)
    if n < 2:
        return Interval(mean, math.nan, math.nan, 1)
    sem = sd / math.sqrt(n)
    if sem <= FLAT * max(1.0, abs(mean)):
        return Interval(mean, mean, mean, n)
    half = float(stdtrit(n - 1, 0.5 + confidence / 2)) * sem  # = scipy.stats.t.interval
    return Interval(mean, mean - half, mean + half, n)


def paired_seeds(
    values: Mapping[int, float], reference: Mapping[int, float]
) -> tuple[list[int], list[float], list[float]]:
    """The seeds both have (sorted), with both sides' values on them: the pairing of a test."""
    seeds = sorted(set(values) & set(reference))
    return seeds, [values[s] for s in seeds], [reference[s] for s in seeds]


def mean_sd(diffs: np.ndarray) -> tuple[float, float]:
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
    mean, sd = mean_sd(diffs)
    return sd <= FLAT * max(1.0, abs(mean))

