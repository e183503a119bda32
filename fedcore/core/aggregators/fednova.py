"""FedNova: normalised averaging (Wang, Liu, Liang, Joshi, Poor; NeurIPS 2020)."""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "fednova/tau_eff": "tau_eff = sum p_k ||a_k||_1, the rescaling of the normalised mean",
    },
}


@register("fednova")
class FedNova(Aggregator):
    """Averages the per-step directions Delta_k / ||a_k||_1, rescaled by tau_eff.

    ``||a_k||_1`` comes from the client (``fedcore.core.clients.extras.accumulation_norm``).
    """

    class HParams(BaseHParams):
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    needs: ClassVar[frozenset[str]] = frozenset({"accumulation_norm"})

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        deltas, p = batch.deltas, batch.weights
        a = batch.stats["accumulation_norm"].to(dtype=deltas.dtype, device=deltas.device)
        # d_k = -Delta_k / ||a_k||_1, 0 for a client that took no step (docs/methods/fednova.md)
        inv_a = torch.where(a != 0, 1.0 / torch.where(a != 0, a, torch.ones_like(a)), 0.0)
        # tau_eff = sum_k p_k ||a_k||_1;  theta_{t+1} = theta_t - eta_s tau_eff sum_k p_k d_k
        tau_eff = p @ a
        metrics = {"fednova/tau_eff": float(tau_eff)}
        return Aggregate(self.hp.server_lr * tau_eff * ((p * inv_a) @ deltas), metrics)
