"""FedProx client: local loss + (mu/2)||w - theta_t||^2 (Li et al., MLSys 2020)."""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from fedcore.core.clients.base import ClientAlgorithm, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records import LocalContext
from fedcore.core.records.plan import LocalPlan


@register("fedprox")
class FedProxClient(ClientAlgorithm):
    """mu (w - theta_t) is added to every step's gradient by the shared SGD step
    (``fedcore.core.clients.sgd``), in both engines."""

    vectorisable = True

    class HParams(BaseHParams):
        mu: float = Field(0.01, ge=0.0)

    hp: HParams

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """Plain minibatches with the proximal coefficient (FedNova's accumulation norm reads
        it from the plan too)."""
        return replace(super().plan(ctx), mu=self.hp.mu)  # grad of (mu/2)||w - theta_t||^2
