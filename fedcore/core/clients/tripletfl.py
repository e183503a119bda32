"""TripletFL client: CE + beta * [D(a,p) - D(a,n) + m]_+ on L2-normalised embeddings."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.core.clients._tuplets import TupletClient, triplet_loss
from fedcore.core.clients.base import register


@register("tripletfl")
class TripletFLClient(TupletClient):
    arity = 3

    class HParams(TupletClient.HParams):
        margin: float = Field(1.0, ge=0.0, lt=2.0)  # D in [0, 2], see TupletClient

    hp: HParams

    def tuplet_loss(
        self, z: list[torch.Tensor], weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        # FaceNet triplet hinge (docs/methods/tripletfl.md), same sampler as FedQuad without n2
        za, zp, zn = z
        return triplet_loss(za, zp, zn, self.hp.margin, weights)
