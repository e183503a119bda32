"""q-FedAvg: q-fair federated averaging (Li, Sanjabi, Beirami, Smith; ICLR 2020)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from fedcore.aggregators.base import Aggregate, Aggregator, UpdateBatch, register
from fedcore.registry import HParams

LOSS_OFFSET = 1e-8  # added to F_k, as in easyFL's qfedavg.py


@register("qfedavg")
class QFedAvg(Aggregator):
    """theta <- theta - sum_k D_k / sum_k h_k with reweighted D_k, h_k (docs/methods/qfedavg.md).

    ``F_k`` is the global model's train loss on client k (``extras.loss_before``). The
    Lipschitz estimate L must be 1 / local.lr (the aggregator does not see the local lr);
    the default 20 matches the default local lr 0.05.
    """

    class HParams(HParams):
        q: float = Field(1.0, ge=0.0, description="fairness exponent; 0 = uniform averaging")
        lipschitz: float = Field(20.0, gt=0.0, description="L = 1 / local.lr")

    needs: ClassVar[frozenset[str]] = frozenset({"loss_before"})

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        q, lip, deltas = self.hp.q, self.hp.lipschitz, batch.deltas
        # The m scalars in float64 on the CPU: F_k^q can be large for big q.
        f = batch.stats["loss_before"].detach().cpu().double() + LOSS_OFFSET
        # docs/methods/qfedavg.md: Delta W_k = L (theta_t - theta_k) = -L Delta_k
        sq_norm = lip**2 * deltas.pow(2).sum(dim=1).detach().cpu().double()  # ||Delta W_k||^2
        fq = f.pow(q)
        # D_k = F_k^q Delta W_k;  h_k = q F_k^(q-1) ||Delta W_k||^2 + L F_k^q
        h = q * f.pow(q - 1) * sq_norm + lip * fq
        # theta_{t+1} = theta_t - sum_k D_k / sum_k h_k = theta_t + sum_k (L F_k^q / sum h) Delta_k
        coef = (lip * fq / h.sum()).to(dtype=deltas.dtype, device=deltas.device)
        metrics = {
            "qfedavg/loss_mean": float(f.mean()),
            "qfedavg/step_scale": float(coef.sum()),
        }
        return Aggregate(coef @ deltas, metrics)
