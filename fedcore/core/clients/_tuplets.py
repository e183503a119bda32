"""Shared machinery of the metric-learning clients (docs/methods/ fedquad, tripletfl, quadrupletfl).

FedQuad's class-aware sampler (docs/methods/fedquad.md), triplet/quadruplet hinges on L2-normalised
embeddings, and ``TupletClient``, the local loop that trains on batches of B tuplets (4B images
for quadruplets) with CE over all images plus ``beta`` times the hinge term.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import torch
from pydantic import Field
from torch import nn

from fedcore.core.clients.base import ClientAlgorithm, batch_mean, cross_entropy
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records import LocalContext, LocalSchedule
from fedcore.core.records.plan import Batch, Finished, LocalPlan


def sample_tuplets(y: torch.Tensor, arity: int, generator: torch.Generator) -> torch.Tensor:
    """Rows ``[a, p, n1]`` (arity 3) or ``[a, p, n1, n2]`` (arity 4) of indices into ``y``.

    One shuffled pass over the anchors (samples whose class has >= 2 samples); for each,
    ``p`` is uniform over the anchor's class minus the anchor, ``c1`` uniform over the other
    classes and ``n1`` uniform within ``c1``, ``c2`` uniform over the classes other than
    ``y_a, c1`` and ``n2`` uniform within ``c2``. Classes are drawn uniformly, not by size, so
    minority classes appear as negatives. Needs ``arity - 1`` classes and one class with two
    samples; returns an empty (0, arity) tensor otherwise.
    """
    y = y.cpu()
    classes, inv, counts = torch.unique(y, return_inverse=True, return_counts=True)
    num = len(classes)
    if num < arity - 1 or not bool((counts >= 2).any()):
        return torch.empty((0, arity), dtype=torch.long)
    order = torch.argsort(inv, stable=True)  # samples grouped by class
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(y)) - starts[inv[order]]  # position within its class

    def uniform(high: torch.Tensor) -> torch.Tensor:
        u = torch.rand(len(high), generator=generator, dtype=torch.float64)
        return (u * high.double()).long()

    def member(cls: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return order[starts[cls] + k]

    anchors = torch.nonzero(counts[inv] >= 2).squeeze(1)
    anchors = anchors[torch.randperm(len(anchors), generator=generator)]
    ca = inv[anchors]
    k = uniform(counts[ca] - 1)
    p = member(ca, k + (k >= rank[anchors]).long())  # skip the anchor itself
    c1 = uniform(torch.full_like(ca, num - 1))
    c1 = c1 + (c1 >= ca).long()  # skip y_a
    rows = [anchors, p, member(c1, uniform(counts[c1]))]
    if arity == 4:
        lo, hi = torch.minimum(ca, c1), torch.maximum(ca, c1)
        c2 = uniform(torch.full_like(ca, num - 2))
        c2 = c2 + (c2 >= lo).long()
        c2 = c2 + (c2 >= hi).long()  # skip y_a and c1
        rows.append(member(c2, uniform(counts[c2])))
    return torch.stack(rows, 1)


def tuplet_batches(
    y: torch.Tensor, arity: int, schedule: LocalSchedule, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Batches of ``batch_size`` tuplets, flattened role by role: ``[a..., p..., n1..., n2...]``.

    The sampler is rebuilt for every epoch (pass over the anchors); with ``schedule.steps``
    set, passes repeat until that many full batches were yielded.
    """
    count, epoch = 0, 0
    while True:
        tuples = sample_tuplets(y, arity, generator)
        bs = min(schedule.batch_size, len(tuples))
        for start in range(0, len(tuples), bs):
            chunk = tuples[start : start + bs]
            if schedule.steps is not None and len(chunk) < bs:
                continue
            yield chunk.T.reshape(-1)
            count += 1
            if schedule.steps is not None and count >= schedule.steps:
                return
        epoch += 1
        if schedule.steps is None and epoch >= schedule.epochs:
            return


def sq_dist(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """D(u, v) = ||u - v||^2 per row."""
    return ((u - v) ** 2).sum(1)


def triplet_loss(
    za: torch.Tensor,
    zp: torch.Tensor,
    zn: torch.Tensor,
    margin: float,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """mean [D(a,p) - D(a,n) + m]_+ (FaceNet form, docs/methods/tripletfl.md), over the real
    tuplets (``weights``) when the batch is padded."""
    return batch_mean(torch.relu(sq_dist(za, zp) - sq_dist(za, zn) + margin), weights)


def quadruplet_loss(
    za: torch.Tensor,
    zp: torch.Tensor,
    zn1: torch.Tensor,
    zn2: torch.Tensor,
    m1: float,
    m2: float,
    anchored: bool = True,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """mean [D(a,p) - D(a,n1) + m1]_+ + mean [D(a,p) - D2 + m2]_+.

    ``anchored``: D2 = D(a, n2), FedQuad's loss (docs/methods/fedquad.md); else D2 = D(n1, n2),
    Chen et al. 2017 (QuadrupletFL, docs/methods/quadrupletfl.md).
    """
    second = sq_dist(za, zn2) if anchored else sq_dist(zn1, zn2)
    first = triplet_loss(za, zp, zn1, m1, weights)
    return first + batch_mean(torch.relu(sq_dist(za, zp) - second + m2), weights)


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "<objective>/fallback_clients": (
            "FedQuad, QuadrupletFL, TripletFL: sampled clients with too few classes for a full "
            "tuplet, trained on a smaller one"
        ),
        "<objective>/ce_only_clients": (
            "tuplet objectives: sampled clients that trained on cross-entropy alone"
        ),
        "<objective>/triplet_fallback_clients": (
            "quadruplet objectives: sampled clients that fell back to triplets"
        ),
    },
}


class TupletClient(ClientAlgorithm):
    """CE over all images + beta * ``tuplet_loss`` on L2-normalised embeddings.

    The embeddings are post-ReLU features (non-negative), so after normalisation
    D(u, v) = 2 - 2 cos(u, v) lies in [0, 2] and every margin must be below 2.

    A client with fewer classes than ``arity - 1`` falls back to smaller tuplets (a quadruplet
    client with 2 classes trains on triplets), and to CE on plain minibatches when no tuplet
    can be formed (1 class, or no class with 2 samples). Fallbacks are reported per round as
    ``<name>/fallback_clients`` (any), ``<name>/ce_only_clients`` and, for quadruplet methods,
    ``<name>/triplet_fallback_clients``.
    """

    arity: ClassVar[int] = 4
    vectorisable = True
    model_needs = ("embedding", "head")

    class HParams(BaseHParams):
        """The weight of the tuplet term, shared by every tuplet objective (which adds its
        margins)."""

        beta: float = Field(1.0, ge=0.0)

    hp: HParams

    def tuplet_loss(
        self, z: list[torch.Tensor], weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        raise NotImplementedError

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """Batches of the largest tuplets the client's classes allow (plain minibatches, arity
        0, when no tuplet can be formed)."""
        _, counts = torch.unique(ctx.data.y_train.cpu(), return_counts=True)
        usable = len(counts) >= 2 and bool((counts >= 2).any())
        arity = min(self.arity, len(counts) + 1) if usable else 0
        if arity == 0:
            return super().plan(ctx)
        batches = tuplet_batches(ctx.data.y_train, arity, ctx.schedule, ctx.generator)
        return LocalPlan(list(batches), self.loss, arity=arity)

    def loss(self, b: Batch) -> torch.Tensor:
        """CE over all images + beta * the tuplet hinges on normalised embeddings, laid out
        role by role (``b.arity`` blocks of rows; padded blocks when masked)."""
        h = b.model.embedding(b.x)
        ce = cross_entropy(b.model.head(h), b.y, b.mask)  # CE on all images (fedquad.md)
        if b.arity == 0:
            return ce
        z = nn.functional.normalize(h, dim=1).view(b.arity, -1, h.shape[1])
        weights = None if b.mask is None else b.mask.tuplets
        return ce + self.hp.beta * self.tuplet_loss(list(z), weights)

    def finish(self, done: Finished) -> None:
        arity, stats = done.plan.arity, done.update.stats
        stats[f"{self.name}/fallback_clients"] = float(arity < self.arity)
        stats[f"{self.name}/ce_only_clients"] = float(arity == 0)
        if self.arity == 4:
            stats[f"{self.name}/triplet_fallback_clients"] = float(arity == 3)
