"""FedAvg of sparse updates, per-coordinate support normalisation (docs/methods/compression.md)."""

from __future__ import annotations

import torch

from fedcore.core.aggregators.base import Aggregator, register, weighted_mean
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


@register("sparse_fedavg")
class SparseFedAvg(Aggregator):
    """``support_normalised``: coordinate j is averaged over the clients that sent it (n_k weights).

    A client "sent" coordinate j when its received delta is non-zero there (a Top-k/Rand-k entry);
    coordinates no client sent get 0. ``false`` is plain FedAvg (p_k weights over all clients).
    """

    class HParams(BaseHParams):
        server_lr: float = 1.0
        support_normalised: bool = True

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        if not self.hp.support_normalised:
            return Aggregate(self.hp.server_lr * weighted_mean(batch.deltas, batch.weights))
        # a_j = sum_{k: j in supp c_k} n_k c_kj / sum_{k: j in supp c_k} n_k  (compression.md)
        n = batch.num_samples
        covered = n @ (batch.deltas != 0).to(batch.deltas.dtype)
        mean = (n @ batch.deltas) / covered.clamp_min(torch.finfo(covered.dtype).tiny)
        return Aggregate(self.hp.server_lr * torch.where(covered > 0, mean, torch.zeros_like(mean)))
