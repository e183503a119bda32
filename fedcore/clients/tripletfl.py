"""TripletFL client: CE + beta * [D(a,p) - D(a,n) + m]_+ on L2-normalised embeddings."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.clients._tuplets import TupletClient, triplet_loss
from fedcore.clients.base import register
from fedcore.registry import HParams


@register("tripletfl")
class TripletFLClient(TupletClient):
    arity = 3

    class HParams(HParams):
        beta: float = Field(1.0, ge=0.0)
        margin: float = Field(1.0, ge=0.0, lt=2.0)  # D in [0, 2], see TupletClient

    hp: HParams

    def tuplet_loss(
        self, z: list[torch.Tensor], weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        # FaceNet triplet hinge (docs/methods/tripletfl.md), same sampler as FedQuad without n2
        return triplet_loss(*z, self.hp.margin, weights)
