"""ConFIG: Conflict-Free Inverse Gradients (Liu, Chu, Thuerey, ICLR 2025), model-wise in FL."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.aggregators.craft import min_norm_solve
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "config/length": (
            "ConFIG's step length, the summed projection of the client pseudo-gradients"
        ),
        "config/conflict_after": "share of non-zero clients conflicting with ConFIG's direction",
    },
}


@register("config")
class ConFIG(Aggregator):
    """ConFIG_update with ProjectionLength on the client pseudo-gradients (docs/methods/config.md).

    ``weights``: ``equal`` (w = 1, ConFIG's EqualWeight) or ``data`` (w_k = n_k / sum_j n_j).
    The direction is computed with ``min_norm_solve`` (= pinv(U) w, torch's default tolerance).
    metrics: ``config/length`` (sum_k g_k . unit) and ``config/conflict_after``
    (fraction of non-zero clients with g_k . g < 0).
    """

    class HParams(BaseHParams):
        weights: Literal["equal", "data"] = "equal"
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # Pseudo-gradients g_k = theta - theta_k = -Delta_k (the one sign flip of this rule).
        pg = -batch.deltas
        norms = torch.linalg.vector_norm(pg, dim=1)
        units = torch.nan_to_num(pg / norms[:, None], nan=0.0)  # U = [g_k/||g_k||], NaN -> 0
        if self.hp.weights == "equal":
            w = torch.ones_like(norms)
        else:
            total = batch.num_samples.sum()
            w = batch.num_samples / total if total > 0 else torch.ones_like(norms) / len(norms)
        direction = min_norm_solve(units, w)  # direction = pinv(U) w
        dir_norm = torch.linalg.vector_norm(direction)
        unit = direction / dir_norm if dir_norm > 0 else torch.zeros_like(direction)
        length = (pg @ unit).sum()  # ProjectionLength: sum_k g_k . unit
        g = length * unit
        nonzero = max(float((norms > 0).sum()), 1.0)
        metrics = {
            "config/length": float(length),
            "config/conflict_after": float((pg @ g < 0).sum()) / nonzero,
        }
        # theta_{t+1} = theta_t - eta_s g   (docs/methods/config.md)
        return Aggregate(-self.hp.server_lr * g, metrics)
