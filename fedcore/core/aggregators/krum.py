"""Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui, Stainer, NeurIPS 2017)."""

from __future__ import annotations

import logging

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

log = logging.getLogger(__name__)


def effective_byzantine(m: int, f: int | None) -> int:
    """f, or floor((m - 3) / 2) when None, reduced to the largest f >= 0 with m > 2f + 2."""
    largest = max((m - 3) // 2, 0)
    return largest if f is None else min(f, largest)


def krum_scores(deltas: torch.Tensor, f: int) -> torch.Tensor:
    """score(k) = sum of squared distances to the m - f - 2 nearest other clients (float64).

    Distances are differences taken in float64, never ||a||^2 + ||b||^2 - 2ab (cdist's matmul
    form for many rows): in float32 that cancels catastrophically for near-identical updates
    and overflows for an attacker's 1e30, and Krum then picks an outlier."""
    m = deltas.shape[0]
    num_neighbours = max(m - f - 2, 0)
    x = deltas.double()
    sq = torch.cdist(x[None], x[None], compute_mode="donot_use_mm_for_euclid_dist")[0] ** 2
    sq.fill_diagonal_(float("inf"))  # a client is not its own neighbour
    nearest = torch.topk(sq, num_neighbours, dim=1, largest=False).values
    return nearest.sum(dim=1)


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "krum/num_byzantine": "f used this round (reduced to the largest valid f when m <= 2f + 2)",
        "krum/f_reduced": "1 when the configured num_byzantine was reduced",
        "krum/selected": "updates averaged (1 for Krum, M for Multi-Krum)",
    },
}


@register("krum")
class Krum(Aggregator):
    """Returns the delta of the client with the lowest Krum score. If m <= 2f + 2, f is reduced
    to the largest valid value (``krum/num_byzantine`` reports the f used)."""

    class HParams(BaseHParams):
        num_byzantine: int | None = Field(None, ge=0, description="f; None = floor((m-3)/2)")
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    def select(self, batch: UpdateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        f = effective_byzantine(batch.m, self.hp.num_byzantine)
        scores = krum_scores(batch.deltas, f)
        chosen = torch.argmin(scores)[None]  # k* = argmin score
        return chosen, self._metrics(f, 1)

    def _metrics(self, f: int, selected: int) -> dict[str, float]:
        asked = self.hp.num_byzantine
        reduced = asked is not None and f < asked
        if reduced and asked is not None and not getattr(self, "_reduction_noted", False):
            self._reduction_noted = True  # once per run, not once per round
            log.warning(
                "%s: num_byzantine=%d needs at least %d clients per round (m > 2f + 2); "
                "using f=%d (metric krum/num_byzantine)",
                self.name, asked, 2 * asked + 3, f,
            )
        return {
            "krum/num_byzantine": float(f),
            "krum/f_reduced": float(reduced),
            "krum/selected": float(selected),
        }

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # docs/methods/krum.md: theta_{t+1} = theta_t + Delta_{k*}  (Multi-Krum: mean of the M best)
        chosen, metrics = self.select(batch)
        return Aggregate(self.hp.server_lr * batch.deltas[chosen].mean(dim=0), metrics)


@register("multikrum")
class MultiKrum(Krum):
    """Plain (unweighted, as in Blanchard et al.) mean of the M lowest-score deltas."""

    class HParams(Krum.HParams):
        num_selected: int | None = Field(None, ge=1, description="M; None = m - f")

    hp: HParams

    def select(self, batch: UpdateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        f = effective_byzantine(batch.m, self.hp.num_byzantine)
        scores = krum_scores(batch.deltas, f)
        num = batch.m - f if self.hp.num_selected is None else min(self.hp.num_selected, batch.m)
        chosen = torch.topk(scores, num, largest=False).indices
        return chosen, self._metrics(f, num)
