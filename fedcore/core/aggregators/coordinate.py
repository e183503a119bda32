"""Coordinate-wise trimmed mean and median (Yin, Chen, Kannan, Bartlett, ICML 2018).

Both are unweighted (the standard form): n_k does not enter. ``coordinate_median`` is also
the reference of the CRF aggregator (docs/methods/crf.md).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


def coordinate_median(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Median along ``dim`` with np.median semantics: the mean of the two middle values for
    an even count (``torch.median`` would return the lower one)."""
    m = x.shape[dim]
    if m % 2 == 1:
        return torch.median(x, dim=dim).values  # the middle value, exact for odd m
    s = torch.sort(x, dim=dim).values
    return 0.5 * (s.select(dim, m // 2 - 1) + s.select(dim, m // 2))


def num_trimmed(beta: float, m: int) -> int:
    """floor(beta m) values dropped on each side (guarded against 0.29 * 100 = 28.999...)."""
    return math.floor(beta * m + 1e-9)


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "trimmed_mean/num_trimmed": "values dropped per side and coordinate, floor(beta m)",
    },
}


@register("trimmed_mean")
class TrimmedMean(Aggregator):
    """Per coordinate: sort the m values, drop the floor(beta m) largest and smallest, average
    the rest (unweighted)."""

    class HParams(BaseHParams):
        trim_fraction: float = Field(0.1, ge=0.0, lt=0.5, description="beta")
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # sort each coordinate, drop floor(beta m) per side, mean the rest (trimmed_mean.md)
        b = num_trimmed(self.hp.trim_fraction, batch.m)
        kept = torch.sort(batch.deltas, dim=0).values[b : batch.m - b]
        metrics = {"trimmed_mean/num_trimmed": float(b)}
        return Aggregate(self.hp.server_lr * kept.mean(dim=0), metrics)


@register("median")
class CoordinateMedian(Aggregator):
    """Coordinate-wise median of the deltas (unweighted; np.median semantics for even m)."""

    class HParams(BaseHParams):
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # docs/methods/trimmed_mean.md: the beta -> 0.5 limit of the trimmed mean
        return Aggregate(self.hp.server_lr * coordinate_median(batch.deltas, dim=0))
