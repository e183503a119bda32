"""FedAvg (McMahan et al. 2017)."""

from __future__ import annotations

from fedcore.core.aggregators.base import Aggregator, register, weighted_mean
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


@register("fedavg")
class FedAvg(Aggregator):
    class HParams(BaseHParams):
        server_lr: float = 1.0

    hp: HParams
    mean_of_deltas = True

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # theta_{t+1} = theta_t + eta_s * sum_k p_k Delta_k   (docs/methods/fedavg.md)
        return Aggregate(self.hp.server_lr * weighted_mean(batch.deltas, batch.weights))
