"""FedQuad client: CE + beta * quadruplet loss anchored at a (Göksu & Pugeault 2025)."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.core.clients._tuplets import TupletClient, quadruplet_loss, triplet_loss
from fedcore.core.clients.base import register


@register("fedquad")
class FedQuadClient(TupletClient):
    anchored = True  # second hinge on D(a, n2); QuadrupletFL overrides

    class HParams(TupletClient.HParams):
        # D = 2 - 2 cos in [0, 2] on L2-normalised post-ReLU (non-negative) embeddings
        m1: float = Field(1.0, ge=0.0, lt=2.0)
        m2: float = Field(0.5, ge=0.0, lt=2.0)

    hp: HParams

    def tuplet_loss(
        self, z: list[torch.Tensor], weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        # l* = [D(a,p) - D(a,n1) + m1]_+ + [D(a,p) - D(a,n2) + m2]_+   (docs/methods/fedquad.md)
        if len(z) == 3:  # 2 local classes: first hinge only (docs/methods/fedquad.md)
            za, zp, zn1 = z
            return triplet_loss(za, zp, zn1, self.hp.m1, weights)
        za, zp, zn1, zn2 = z
        return quadruplet_loss(za, zp, zn1, zn2, self.hp.m1, self.hp.m2, self.anchored, weights)
