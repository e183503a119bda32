"""SCAFFOLD server (Karimireddy et al., ICML 2020), docs/methods/scaffold.md.

s = eta_g * mean_k delta_k (uniform by default) and c <- c + (1/N) sum_k Delta c_k, which keeps
c equal to the mean of all N client control variates. c goes down to every sampled client.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register, weighted_mean
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, SendsUpdate
from fedcore.core.models.layout import ParamLayout
from fedcore.core.numerics.control_variates import reconstructed_delta_c
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


class ControlVariateServer(Aggregator):
    """Keeps the server control variate c (zeros until the first round) and broadcasts it."""

    def setup(self, num_clients: int, layout: ParamLayout) -> None:
        super().setup(num_clients, layout)
        self.c = torch.zeros(layout.dim)

    def broadcast(self) -> dict[str, torch.Tensor]:
        return {"c": self.c}

    def state_dict(self) -> dict[str, Any]:
        return {"c": self.c.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.c = state["c"].clone()


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "scaffold/c_norm": "norm of the server control variate c",
    },
}


@register("scaffold")
class Scaffold(ControlVariateServer):
    class HParams(BaseHParams):
        server_lr: float = Field(1.0, gt=0.0)  # eta_g
        weighting: Literal["uniform", "samples"] = "uniform"  # of the deltas; c is always 1/N

    hp: HParams

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        """The server reads the SCAFFOLD client's Delta c_i (or rebuilds it from its delta)."""
        return [SendsUpdate("scaffold", "scaffold")]

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        deltas = batch.deltas
        c = self.c.to(deltas)
        if self.hp.weighting == "uniform":
            step = self.hp.server_lr * deltas.mean(dim=0)
        else:
            step = self.hp.server_lr * weighted_mean(deltas, batch.weights)
        if "delta_c" in batch.extras:
            delta_c = batch.extras["delta_c"]
        else:  # uplink: reconstruct
            assert batch.num_steps is not None  # filled by the round loop
            delta_c = reconstructed_delta_c(deltas, c, batch.num_steps, batch.stats["local_lr"])
        self.c = c + delta_c.sum(dim=0) / self.num_clients  # c <- c + (m/N) mean Delta c
        return Aggregate(step, {"scaffold/c_norm": float(self.c.norm())})
