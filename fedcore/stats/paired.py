"""Paired tests on per-seed differences and their power: the two-sided test, TOST's
equivalence test, the exact sign-flip test for differences equal on every seed, the smallest
difference a comparison detects and the seeds a difference needs."""

from __future__ import annotations

import functools
import math

import numpy as np

from fedcore.stats.intervals import is_flat, mean_sd

POWER = 0.8  # of the detectable-difference and seeds-for figures


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
    mean, sd = mean_sd(diffs)
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
    mean, sd = mean_sd(diffs)
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
    from scipy import integrate, special, stats

    df = n - 1
    crit = float(stats.t.ppf(1 - level / 2, df))
    shift = effect * math.sqrt(n)
    log_norm = math.lgamma(df / 2) + df / 2 * math.log(2)  # of the chi-squared(df) density

    def given(v: float) -> float:  # the normal tails times V's chi-squared(df) density
        bar = crit * math.sqrt(v / df)
        tails = special.ndtr(shift - bar) + special.ndtr(-bar - shift)
        return float(tails * math.exp(special.xlogy(df / 2 - 1, v) - v / 2 - log_norm))

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


