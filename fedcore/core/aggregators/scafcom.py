"""SCAFCOM server (Huang, Li, Li, ICLR 2024), docs/methods/scafcom.md.

Clients send only the compressed increments d_k = C(v_k+ - c_k). The step is
s = -gamma (c + mean_k d_k) with gamma = eta_g * lr * K (or an absolute ``gamma``), and
c <- c + (1/N) sum_k d_k keeps c the mean of all client control variates.
"""

from __future__ import annotations

from pydantic import Field

from fedcore.core.aggregators.base import register
from fedcore.core.aggregators.scaffold import ControlVariateServer
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, SendsUpdate
from fedcore.core.metrics import conflict_fraction
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "scafcom/gamma": "SCAFCOM's control-variate step size gamma",
        "scafcom/c_norm": "norm of the server control variate c",
    },
}


@register("scafcom")
class Scafcom(ControlVariateServer):
    class HParams(BaseHParams):
        server_lr: float = Field(1.0, gt=0.0)  # eta_g in gamma = eta_g * lr * K
        gamma: float | None = Field(None, gt=0.0)  # absolute server step (SA-PEF: 3.0)

    hp: HParams

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        """The server reads the SCAFCOM client's control-variate increment."""
        return [SendsUpdate("scafcom", "scafcom")]

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        assert batch.num_steps is not None  # filled by the round loop
        moved = batch.num_steps > 0  # a client without a local step sent nothing useful
        inc = batch.extras["cv_increment"][moved.to(batch.deltas.device)]
        c = self.c.to(batch.deltas)
        if inc.shape[0] == 0:
            return Aggregate(c.new_zeros(c.shape), {"scafcom/gamma": 0.0})
        if self.hp.gamma is not None:
            gamma = self.hp.gamma
        else:  # K: the round's mean step count (= local.steps in steps mode)
            lr = float(batch.stats["local_lr"][moved].mean())
            gamma = self.hp.server_lr * lr * float(batch.num_steps[moved].double().mean())
        per_client = -gamma * (c + inc)  # each client's implied model delta (for metrics)
        step = per_client.mean(dim=0)  # = -gamma (c + mean_k d_k)
        self.c = c + inc.sum(dim=0) / self.num_clients
        deltas = batch.deltas.clone()  # the batch has no deltas: the implied ones measure
        deltas[moved.to(deltas.device)] = per_client  # the round's conflict
        return Aggregate(step, {
            "scafcom/gamma": gamma, "scafcom/c_norm": float(self.c.norm()),
            "agg/conflict_fraction": conflict_fraction(deltas, step),
        })
