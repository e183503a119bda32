"""The training-state rule: climbing or plateaued at the endpoint, from the last two windows."""

from __future__ import annotations

import math

import pytest

from fedcore.stats.training_state import (
    CLIMBING,
    PLATEAUED,
    SHORT,
    training_state,
    window_change,
)


def test_the_change_is_between_the_last_two_windows():
    assert window_change([0.1, 0.2, 0.3, 0.5, 0.7], 2) == pytest.approx(0.6 - 0.25)
    assert math.isnan(window_change([0.1, 0.2, 0.3], 2))


def test_a_curve_that_still_gains_is_climbing():
    curves = [[0.3 + 0.02 * r + 0.001 * s for r in range(20)] for s in range(3)]
    st = training_state(curves, 5)
    assert st.state == CLIMBING and st.change == pytest.approx(0.1)
    assert st.text().startswith("climbing (+0.100")


def test_a_flat_curve_or_a_change_within_seed_noise_is_plateaued():
    flat = [[0.8] * 10 for _ in range(3)]
    assert training_state(flat, 5).state == PLATEAUED
    noisy = [[0.8] * 5 + [0.8 + d] * 5 for d in (0.05, -0.04, 0.0)]  # mean +0.003, sd 0.045
    assert training_state(noisy, 5).state == PLATEAUED
    big_but_noisy = [[0.5] * 5 + [0.5 + d] * 5 for d in (0.2, -0.15, 0.0)]
    assert training_state(big_but_noisy, 5).state == PLATEAUED


def test_a_run_too_short_for_two_windows_says_so():
    st = training_state([[0.5, 0.6, 0.7]], 5)
    assert st.state == SHORT and "fewer than 10 evaluations" in st.text()
