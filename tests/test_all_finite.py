"""``all_finite`` answers exactly as ``torch.isfinite(t).all()`` (it reduces by a sum first)."""

from __future__ import annotations

import math

import pytest
import torch

from fedcore.core.numerics.finite import all_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_agrees_with_the_elementwise_test(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        t = torch.randn(int(torch.randint(1, 300, (1,), generator=gen)), generator=gen).to(dtype)
        kind = trial % 5
        if kind:
            i = int(torch.randint(0, len(t), (1,), generator=gen))
            t[i] = (math.nan, math.inf, -math.inf, torch.finfo(dtype).max)[kind - 1]
        assert all_finite(t) == bool(torch.isfinite(t).all()), (trial, kind)


def test_opposite_infinities_and_overflowing_sums() -> None:
    assert not all_finite(torch.tensor([math.inf, -math.inf, 1.0]))  # sum NaN
    big = torch.full((4,), torch.finfo(torch.float32).max)
    assert math.isinf(float(big.sum()))  # the sum overflows, every entry is finite
    assert all_finite(big)
    assert all_finite(-big)


def test_empty_and_integer_tensors() -> None:
    assert all_finite(torch.zeros(0))
    assert all_finite(torch.arange(5))
    assert all_finite(torch.zeros(3, 4, dtype=torch.float64))
