"""FedBuff: buffered asynchronous aggregation (Nguyen, Malik, Zhan, Yousefpour, Rabbat,
Malek, Huba; AISTATS 2022)."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator

from fedcore.core.aggregators.base import Aggregator, register, weighted_mean
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, setting
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "fedbuff/staleness_mean": "mean staleness (server steps since dispatch) of the applied "
        "updates",
        "fedbuff/weight_mean": "mean staleness weight s(tau) of the applied updates",
    },
}

WHO = "FedBuff (an asynchronous rule)"


def staleness_weight(staleness: torch.Tensor, kind: str) -> torch.Tensor:
    """s(tau): the paper's 1 / sqrt(1 + tau), or 1 (``constant``)."""
    if kind == "sqrt":
        return 1.0 / torch.sqrt(1.0 + staleness)
    return torch.ones_like(staleness)


@register("fedbuff")
class FedBuff(Aggregator):
    """Applies the sample-weighted mean of the buffer's deltas, each scaled by its staleness
    weight: theta <- theta + eta_s sum_k p_k s(tau_k) Delta_k (docs/methods/fedbuff.md)."""

    class HParams(BaseHParams):
        server_lr: float = Field(1.0, gt=0.0)
        buffer_size: int = Field(5, ge=1, description="K: updates a server step applies")
        concurrency: int = Field(10, ge=1, description="clients training at once")
        staleness: Literal["sqrt", "constant"] = "sqrt"

        @model_validator(mode="after")
        def _fits(self) -> FedBuff.HParams:
            if self.buffer_size > self.concurrency:
                raise ValueError(f"buffer_size: {self.buffer_size} exceeds concurrency="
                                 f"{self.concurrency}; allowed: 1..{self.concurrency}")
            return self

    hp: HParams
    needs: ClassVar[frozenset[str]] = frozenset({"staleness"})

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        return [
            setting("method.client.algorithm", ("fedavg", "fedprox"), WHO,
                    "takes the client objectives fedavg and fedprox",
                    "others keep per-client state (committed out of order here) or are not "
                    "checked asynchronously"),
            setting("method.stages", (None,), WHO, "takes no client stages",
                    "allowed: unset"),
            setting("method.sampler", (None,), WHO, "dispatches idle clients uniformly",
                    "allowed: unset (uniform)"),
            setting("privacy.mechanism", ("none",), WHO, "is not privacy-accounted",
                    "allowed: none"),
            setting("system.deadline_s", (None,), WHO, "has no round deadline",
                    "allowed: unset"),
        ]

    def buffer(self) -> tuple[int, int]:
        return self.hp.concurrency, self.hp.buffer_size

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        tau = batch.stats["staleness"]
        w = staleness_weight(tau, self.hp.staleness).to(batch.deltas.dtype)
        step = self.hp.server_lr * weighted_mean(batch.deltas, batch.weights * w)
        metrics = {"fedbuff/staleness_mean": float(tau.mean()),
                   "fedbuff/weight_mean": float(w.double().mean())}
        return Aggregate(step, metrics)
