"""FedProx client: local loss + (mu/2)||w - theta_t||^2 (Li et al., MLSys 2020)."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.clients.base import ClientAlgorithm, LocalContext, register
from fedcore.registry import HParams


@register("fedprox")
class FedProxClient(ClientAlgorithm):
    class HParams(HParams):
        mu: float = Field(0.01, ge=0.0)

    @property
    def proximal_mu(self) -> float:
        """The proximal coefficient (FedNova's accumulation norm reads it)."""
        return self.hp.mu

    def after_backward(self, params: list[torch.Tensor], ctx: LocalContext) -> None:
        # grad of (mu/2)||w - theta_t||^2 is mu (w - theta_t)   (docs/methods/fedprox.md)
        if self.hp.mu == 0.0:
            return
        for p, anchor in zip(params, ctx.global_tensors(), strict=True):
            p.grad.add_(p.detach() - anchor, alpha=self.hp.mu)
