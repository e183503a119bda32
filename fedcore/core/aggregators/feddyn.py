"""FedDyn server (Acar et al., ICLR 2021), docs/methods/feddyn.md.

The server keeps h (zeros until the first round): h <- h - alpha (1/N) sum_{k in P_t} delta_k
over the accepted clients, then theta^t = mean_{k in P_t} theta_k - h / alpha, i.e. the step
mean_k delta_k - h / alpha. alpha is the client's (the ``feddyn_alpha`` stat it sends).
"""

from __future__ import annotations

from typing import Any

import torch

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, SendsUpdate
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

ALPHA = "feddyn_alpha"  # as fedcore.core.clients.feddyn sends it


@register("feddyn")
class FedDyn(Aggregator):
    """Uniform mean of the accepted clients' models, corrected by the server state h."""

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        """The server reads the FedDyn client's alpha and corrects its uniform mean."""
        return [SendsUpdate("feddyn", "feddyn")]

    def setup(self, num_clients: int, layout: ParamLayout) -> None:
        super().setup(num_clients, layout)
        self.h = torch.zeros(layout.dim)

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        deltas = batch.deltas
        alpha = float(batch.stats[ALPHA][0])
        self.h = self.h.to(deltas) - alpha * deltas.sum(dim=0) / self.num_clients
        step = deltas.mean(dim=0) - self.h / alpha
        return Aggregate(step)

    def state_dict(self) -> dict[str, Any]:
        return {"h": self.h.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.h = state["h"].clone()
