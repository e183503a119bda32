"""QuadrupletFL client: Chen et al. 2017's quadruplet loss, second hinge on D(n1, n2)."""

from __future__ import annotations

from fedcore.core.clients.base import register
from fedcore.core.clients.fedquad import FedQuadClient


@register("quadrupletfl")
class QuadrupletFLClient(FedQuadClient):
    # [D(a,p) - D(a,n1) + a1]_+ + [D(a,p) - D(n1,n2) + a2]_+   (docs/methods/quadrupletfl.md)
    anchored = False
