"""Statistics over seeds (fedcore.pipeline.stats) against scipy and statsmodels on fixed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from fedcore.pipeline.stats import compare, holm, mean_interval, paired_seeds, seeds_needed

A = [0.91, 0.93, 0.90, 0.94, 0.92]
B = [0.88, 0.92, 0.86, 0.91, 0.90]


def test_interval_is_students_t():
    iv = mean_interval(A)
    low, high = stats.t.interval(0.95, len(A) - 1, loc=np.mean(A), scale=stats.sem(A))
    assert (iv.mean, iv.low, iv.high, iv.n) == pytest.approx((np.mean(A), low, high, 5))
    one = mean_interval([0.5])
    assert one.n == 1 and math.isnan(one.low) and one.text() == "0.5000 (1 seed, no interval)"
    assert mean_interval([0.5, math.nan, 0.7]).n == 2  # a missing seed is not a value


def test_paired_comparison_is_scipys_paired_t_test():
    c = compare(A, B)
    assert c.p == pytest.approx(stats.ttest_rel(A, B).pvalue)
    diff = np.subtract(A, B)
    low, high = stats.t.interval(0.95, 4, loc=diff.mean(), scale=stats.sem(diff))
    assert (c.difference.low, c.difference.high) == pytest.approx((low, high))
    assert c.verdict == "better"
    assert compare(B, A).verdict == "worse"
    assert compare(A, B, higher_is_better=False).verdict == "worse"  # e.g. rounds to target
    # the pairing matters: the same numbers unpaired are not told apart (Welch p ~ 0.2)
    assert stats.ttest_ind(A, B, equal_var=False).pvalue > 0.05 > c.p


def test_identical_numbers_are_indistinguishable():
    c = compare(A, A)
    assert c.verdict == "indistinguishable" and c.p == 1.0 and c.seeds_needed is None
    assert compare([0.5], [0.4]).verdict == "no test"
    # the same nonzero difference on every seed has no spread: decided, not undefined
    assert compare([0.6, 0.7], [0.5, 0.6]).verdict == "better"
    with pytest.raises(ValueError, match="same seeds"):
        compare([0.1, 0.2], [0.1])


def test_holm_matches_statsmodels_and_reverses_weak_verdicts():
    comps = [compare(A, B), compare(B, [b - 0.001 for b in B]), compare(A, A)]
    adjusted = holm(comps)
    expected = multipletests([c.p for c in comps], method="holm")[1]
    assert [c.p_adjusted for c in adjusted] == pytest.approx(list(expected))
    assert [c.p for c in adjusted] == [c.p for c in comps]  # raw p kept
    weak = compare([0.52, 0.53, 0.52], [0.50, 0.50, 0.50])
    assert weak.verdict == "better" and weak.p > 0.05 / 3
    after = holm([weak, compare(A, A), compare(A, A)])[0]
    assert after.verdict == "indistinguishable" and after.seeds_needed is not None


def test_seeds_needed_is_statsmodels_power():
    d = np.subtract([0.51, 0.55, 0.50, 0.56], [0.50, 0.50, 0.51, 0.52])
    effect = d.mean() / d.std(ddof=1)
    n = TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8)
    assert seeds_needed(d) == math.ceil(n)
    assert seeds_needed([0.0, 0.0]) is None
    c = compare([0.51, 0.55, 0.50, 0.56], [0.50, 0.50, 0.51, 0.52])
    assert c.verdict == "indistinguishable" and c.seeds_needed == math.ceil(n)
    assert f"(~{math.ceil(n)} seeds)" in c.text()


def test_pairing_keeps_only_common_seeds_in_seed_order():
    seeds, mine, theirs = paired_seeds({2: 0.3, 0: 0.1, 5: 0.9}, {0: 1.0, 2: 3.0, 7: 0.0})
    assert (seeds, mine, theirs) == ([0, 2], [0.1, 0.3], [1.0, 3.0])


def test_seeds_needed_for_a_tiny_effect_is_large_not_nan():
    d = [0.001, -0.02, 0.018, 0.0015, -0.0002]  # effect ~0.005: statsmodels' solver gives up
    n = seeds_needed(d)
    effect = abs(np.mean(d)) / np.std(d, ddof=1)
    assert n is not None and n > 1000
    assert n == pytest.approx(((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / effect) ** 2 + 2,
                              rel=0.01)
