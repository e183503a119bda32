"""q-FedAvg: q-fair federated averaging (Li, Sanjabi, Beirami, Smith; ICLR 2020)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

LOSS_OFFSET = 1e-8  # added to F_k, as in easyFL's qfedavg.py


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "qfedavg/loss_mean": "mean of the clients' loss F_k on the global model",
        "qfedavg/step_scale": "sum of the per-client coefficients of the step",
        "qfedavg/L": "mean Lipschitz estimate L = 1 / local lr of the round",
    },
}


@register("qfedavg")
class QFedAvg(Aggregator):
    """theta <- theta - sum_k D_k / sum_k h_k with the loss-reweighted D_k, h_k of
    docs/methods/qfedavg.md.

    ``F_k`` is the global model's train loss on client k (``extras.loss_before``); the
    Lipschitz estimate is L = 1 / eta_l, the local lr of the round (``extras.local_lr``, so a
    decayed lr gives a larger L). L is not a hyper-parameter.
    """

    class HParams(BaseHParams):
        q: float = Field(1.0, ge=0.0, description="fairness exponent; 0 = uniform averaging")

        @model_validator(mode="before")
        @classmethod
        def _no_free_lipschitz(cls, data: Any) -> Any:
            if isinstance(data, dict) and "lipschitz" in data:
                raise ValueError(
                    "lipschitz: not a hyper-parameter; q-FedAvg uses L = 1 / local lr of the "
                    "round (set local.lr)"
                )
            return data

    hp: HParams

    needs: ClassVar[frozenset[str]] = frozenset({"loss_before", "local_lr"})

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        q, deltas = self.hp.q, batch.deltas
        # The m scalars in float64 on the CPU: F_k^q can be large for big q.
        f = batch.stats["loss_before"].detach().cpu().double() + LOSS_OFFSET
        lip = 1.0 / batch.stats["local_lr"].detach().cpu().double()  # L = 1 / eta_l, per client
        # Delta W_k = L (theta_t - theta_k) = -L Delta_k
        sq_norm = lip**2 * deltas.pow(2).sum(dim=1).detach().cpu().double()  # ||Delta W_k||^2
        fq = f.pow(q)
        # D_k = F_k^q Delta W_k;  h_k = q F_k^(q-1) ||Delta W_k||^2 + L F_k^q
        h = q * f.pow(q - 1) * sq_norm + lip * fq
        # theta_{t+1} = theta_t - sum_k D_k / sum_k h_k = theta_t + sum_k (L F_k^q / sum h) Delta_k
        coef = (lip * fq / h.sum()).to(dtype=deltas.dtype, device=deltas.device)
        metrics = {
            "qfedavg/loss_mean": float(f.mean()),
            "qfedavg/step_scale": float(coef.sum()),
            "qfedavg/L": float(lip.mean()),
        }
        return Aggregate(coef @ deltas, metrics)
