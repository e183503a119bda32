"""Statistics over seeds (fedcore.stats.intervals, .paired, .verdicts) against scipy and
statsmodels on fixed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from fedcore.stats.intervals import mean_interval, paired_seeds
from fedcore.stats.paired import (
    detectable_difference,
    equivalence_p,
    seeds_for,
    sign_flip_p,
    superiority_p,
)
from fedcore.stats.verdicts import compare, family_test

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
    assert (c.interval.low, c.interval.high) == pytest.approx((low, high))
    assert c.verdict == "better"
    assert compare(B, A).verdict == "worse"
    assert compare(A, B, higher_is_better=False).verdict == "worse"  # e.g. rounds to target
    # the pairing matters: the same numbers unpaired are not told apart (Welch p ~ 0.2)
    assert stats.ttest_ind(A, B, equal_var=False).pvalue > 0.05 > c.p


def test_equivalence_is_statsmodels_tost():
    x = np.array([0.901, 0.899, 0.902, 0.900, 0.898])
    y = np.array([0.900, 0.900, 0.901, 0.901, 0.899])
    expected = ttost_paired(x, y, -0.01, 0.01)[0]
    assert equivalence_p(x - y, 0.01) == pytest.approx(expected)
    assert compare(list(x), list(y), margin=0.01).verdict == "equivalent"
    # noisy and small: neither, with the difference it could detect
    c = compare([0.50, 0.60, 0.55], [0.52, 0.57, 0.60])
    assert c.verdict == "undecided" and math.isfinite(c.detectable)
    assert "detects ±" in c.text()


def test_constant_differences_get_the_exact_sign_flip_p_never_zero():
    c = compare([15, 12], [16, 13], higher_is_better=False)
    assert c.p == pytest.approx(2 / 2**2) and c.verdict == "undecided"
    assert superiority_p(np.array([0.1] * 5)) == pytest.approx(2 / 2**5)
    assert superiority_p(np.zeros(4)) == 1.0
    # ten copies under Holm stay undecided (before: p = 0 and "better" after Holm)
    comps = family_test([[15, 12]] * 10, [[16, 13]] * 10, higher_is_better=False)
    assert {x.verdict for x in comps} == {"undecided"}
    # the permutation p-value itself, by enumeration
    d = np.array([0.3, -0.1, 0.2, 0.4])
    signs = np.array([[1 - 2 * ((i >> k) & 1) for k in range(4)] for i in range(16)])
    expected = np.mean(np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) - 1e-12)
    assert sign_flip_p(d) == pytest.approx(expected)


def test_identical_numbers_are_equivalent_once_the_exact_bound_allows():
    c = compare(A, A)  # 5 seeds: the exact TOST bound is 1/32 <= 0.05
    assert c.verdict == "equivalent" and c.p == 1.0
    assert compare(A[:3], A[:3]).verdict == "undecided"  # 1/8: three seeds cannot say it
    assert compare([0.5], [0.4]).verdict == "no test"
    with pytest.raises(ValueError, match="same seeds"):
        compare([0.1, 0.2], [0.1])


def test_holm_within_a_family_matches_statsmodels_and_intervals_agree_with_verdicts():
    rng = np.random.default_rng(3)
    ref = rng.normal(0.8, 0.02, 6)
    rows = [ref - rng.normal(mu, 0.01, 6) for mu in (0.05, 0.004, 0.0, 0.03, -0.02)]
    comps = family_test([list(ref)] * len(rows), [list(r) for r in rows])
    raw = [stats.ttest_rel(ref, r).pvalue for r in rows]
    rejected = multipletests(raw, alpha=0.05, method="holm")[0]
    assert [c.verdict in ("better", "worse") for c in comps] == list(rejected)
    for c in comps:  # the interval at Holm's level excludes 0 exactly when better/worse
        assert c.interval.excludes(0.0) == (c.verdict in ("better", "worse"))
    assert all(c.level <= 0.05 for c in comps)


def test_decided_rows_count_in_the_step_down():
    # a row decided at an earlier look counts as rejected; an out-of-play one as never
    weak = [[0.52, 0.53, 0.52, 0.53]], [[0.50, 0.50, 0.51, 0.50]]
    alone = family_test(*weak)[0]
    assert alone.verdict == "better"
    with_blocked = family_test(weak[0] * 3, weak[1] * 3, decided=[None, "blocked", "blocked"])
    assert with_blocked[0].level == pytest.approx(0.05 / 3)
    with_decided = family_test(weak[0] * 3, weak[1] * 3, decided=[None, "better", "worse"])
    assert with_decided[0].level == pytest.approx(0.05)


def test_detectable_difference_and_seeds_for_are_statsmodels_power():
    effect = TTestPower().solve_power(nobs=5, alpha=0.05, power=0.8)
    assert detectable_difference(0.02, 5, 0.05) == pytest.approx(effect * 0.02)
    n = TTestPower().solve_power(effect_size=0.02 / 0.021, alpha=0.01, power=0.8)
    assert seeds_for(0.02, 0.021, 0.01) == math.ceil(n)
    assert seeds_for(0.0, 0.02, 0.05) is None
    tiny = seeds_for(0.0001, 0.02, 0.05)
    assert tiny is not None and tiny > 1000


def test_pairing_keeps_only_common_seeds_in_seed_order():
    seeds, mine, theirs = paired_seeds({2: 0.3, 0: 0.1, 5: 0.9}, {0: 1.0, 2: 3.0, 7: 0.0})
    assert (seeds, mine, theirs) == ([0, 2], [0.1, 0.3], [1.0, 3.0])


def test_an_interval_past_the_range_of_a_difference_is_cut_to_it():
    from fedcore.stats.intervals import DIFFERENCE_RANGE

    # three seeds near the top of the range: the 95 % t-interval reaches past +1
    c = compare([0.95, 0.8, 0.9], [0.05, 0.1, 0.05], bounds=DIFFERENCE_RANGE)
    assert c.interval.high > 1 and c.resolved
    shown = c.shown
    assert DIFFERENCE_RANGE[0] <= shown.low <= shown.high == DIFFERENCE_RANGE[1]
    assert shown.low == c.interval.low and shown.mean == c.interval.mean
    assert c.text("+.3f").startswith(f"{c.interval.mean:+.3f} [{c.interval.low:+.3f}, +1.000]")


def test_a_comparison_that_cannot_resolve_the_range_says_so_instead_of_a_number():
    # interval [-2.16, +2.72], detects ±3.2: wider than the range
    c = compare([0.95, 0.05, 0.9], [0.05, 0.9, 0.1], bounds=(-1.0, 1.0))
    assert not c.resolved
    assert c.text("+.3f") == "+0.283 (no resolution at n = 3), undecided"
    close = compare(A, B)  # a tight difference resolves
    assert close.resolved and close.text() == "+0.0260 [+0.0118, +0.0402], better"


def test_an_equivalent_verdict_shows_its_tost_interval():
    ref = [0.900, 0.910, 0.905, 0.915, 0.902, 0.908, 0.911, 0.906]
    row = [r + d for r, d in zip(ref, [0.001, -0.001, 0.002, 0.0, -0.002, 0.001, 0.0, -0.001],
                                 strict=True)]
    c = compare(row, ref, margin=0.01)
    assert c.verdict == "equivalent"
    assert c.tost is not None
    tost = mean_interval([r - f for r, f in zip(row, ref, strict=True)], 1 - 2 * c.level)
    assert (c.shown.low, c.shown.high) == pytest.approx((tost.low, tost.high))
    assert -0.01 < c.shown.low and c.shown.high < 0.01
    assert c.shown.high - c.shown.low < c.interval.high - c.interval.low  # 90 %, not 95 %
    assert "TOST 90 % interval" in c.text()


def test_a_p_value_within_ten_percent_of_its_threshold_is_fragile():
    from dataclasses import replace

    c = compare(A, B)
    assert c.verdict == "better"
    assert replace(c, p=c.level * 0.95).fragile
    assert not replace(c, p=c.level * 0.5).fragile
    # the case: p = 0.003541 against 0.003571
    hair = replace(c, p=0.003541, level=0.003571)
    assert hair.fragile and "fragile: p = 0.00354 against 0.00357" in hair.fragile_text()
    undecided = replace(c, verdict="undecided", p=0.0258, level=0.025)
    assert undecided.fragile


def test_the_detectable_effect_has_the_stated_power_at_every_n_and_level():
    """statsmodels' solve_power returned unconverged effects silently (power 0.61 instead of
    0.8 at n = 3, level 0.0125; 0.23 at level 0.00278): the root is now bracketed."""
    from fedcore.stats.paired import detectable_effect, paired_power

    for n in (2, 3, 4, 5, 8, 20):
        for level in (0.05, 0.025, 0.0125, 0.05 / 9 / 2, 0.00278):
            effect = detectable_effect(n, level)
            assert paired_power(effect, n, level) == pytest.approx(0.8, abs=1e-6), (n, level)


def test_paired_power_is_the_noncentral_t_where_scipy_has_it_and_finite_where_not():
    from scipy import stats as sps

    from fedcore.stats.paired import paired_power

    crit = sps.t.ppf(1 - 0.0125 / 2, 2)
    for effect in (0.5, 1.0, 3.0, 7.0, 10.0):
        exact = sps.nct.sf(crit, 2, effect * 3 ** 0.5) + sps.nct.cdf(-crit, 2, effect * 3 ** 0.5)
        assert paired_power(effect, 3, 0.0125) == pytest.approx(exact, abs=1e-9)
    assert 0.6 < paired_power(5.0, 3, 0.0125) < 0.62  # where scipy's noncentral t gives NaN


def test_seeds_for_is_the_fewest_seeds_with_the_stated_power():
    from fedcore.stats.paired import paired_power, seeds_for

    for difference, sd, level in ((0.02, 0.02, 0.025), (0.01, 0.05, 0.00625), (0.1, 0.05, 0.05)):
        n = seeds_for(difference, sd, level)
        assert n is not None and paired_power(difference / sd, n, level) >= 0.8
        assert n == 2 or paired_power(difference / sd, n - 1, level) < 0.8
