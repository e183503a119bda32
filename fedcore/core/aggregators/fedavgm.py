"""FedAvgM: FedAvg with server momentum (Hsu et al. 2019)."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register, weighted_mean
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


@register("fedavgm")
class FedAvgM(Aggregator):
    class HParams(BaseHParams):
        beta: float = Field(0.9, ge=0.0, lt=1.0)
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams
    mean_of_deltas = True

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.momentum: torch.Tensor | None = None

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # v <- beta v + (-Delta_bar);  theta <- theta - eta_s v   (docs/methods/fedavgm.md)
        pseudo_grad = -weighted_mean(batch.deltas, batch.weights)
        if self.momentum is None:
            self.momentum = torch.zeros_like(pseudo_grad)
        self.momentum = self.hp.beta * self.momentum + pseudo_grad
        return Aggregate(-self.hp.server_lr * self.momentum)

    def state_dict(self) -> dict[str, Any]:
        return {"momentum": self.momentum}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.momentum = state["momentum"]
