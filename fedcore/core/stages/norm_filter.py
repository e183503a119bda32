"""Server-side filter relative to the round: an update whose norm exceeds ``factor`` times the
median norm of the round's updates is rejected (a round-level stage, ``receive_round``).

The norm is that of every vector the client sent, as received (after compression); the median
is over the messages no earlier stage rejected, non-finite norms left out."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from fedcore.core.component.registry import HParams
from fedcore.core.component.registry import HParams as AnyHParams
from fedcore.core.records import Message
from fedcore.core.stages.base import Stage, register

if TYPE_CHECKING:
    from fedcore.core.records import StageContext


class MedianNormHParams(HParams):
    factor: float = Field(3.0, gt=0.0, description="reject norms above factor x the median")


# The overrides of a tiny run that emits these metrics (fedcore.core.metrics.catalogue).
EMITTED_WHEN = ["method.stages=[{stage: median_norm, factor: 0.5}]"]

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "median_norm/median": "median norm of the updates the median_norm filter judged this round",
    },
}


@register("median_norm")
class MedianNorm(Stage):
    side = "server"
    HParams: ClassVar[type[AnyHParams]] = MedianNormHParams
    hp: MedianNormHParams

    def receive_round(self, msgs: list[Message], rc: StageContext) -> dict[str, float]:
        live = [m for m in msgs if m.accepted]
        norms = [math.sqrt(sum(float(v.double().square().sum()) for v in m.sent.values()))
                 for m in live]
        finite = [n for n in norms if math.isfinite(n)]
        if not finite:
            return {}
        median = statistics.median(finite)
        for msg, norm in zip(live, norms, strict=True):
            if norm > self.hp.factor * median:
                msg.reject(self.name)
        return {"median_norm/median": median}
