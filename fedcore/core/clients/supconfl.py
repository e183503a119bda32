"""SupConFL client: CE + beta * supervised contrastive loss in the batch (Khosla et al. 2020)."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from fedcore.core.clients.base import ClientAlgorithm, cross_entropy, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.plan import Batch


def supcon_loss(
    z: torch.Tensor, y: torch.Tensor, temperature: float, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """SupCon L_out on L2-normalised ``z``: mean over anchors i with a positive of
    -1/|P(i)| sum_{p in P(i)} log( exp(u_i.u_p/tau) / sum_{a != i} exp(u_i.u_a/tau) ).
    Zero when no sample of the batch has a same-class partner.

    ``rows`` (1 = real sample) restricts anchors, positives and denominators to the real rows
    of a padded batch, with no data-dependent branch (vmappable); None: every row is real.
    """
    if rows is not None:
        return _masked_supcon(z, y, temperature, rows > 0)
    u = nn.functional.normalize(z, dim=1)
    eye = torch.eye(len(y), dtype=torch.bool, device=z.device)
    sim = (u @ u.T / temperature).masked_fill(eye, float("-inf"))
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    pos = (y[:, None] == y[None, :]) & ~eye
    npos = pos.sum(1)
    has = npos > 0
    if not bool(has.any()):
        return z.sum() * 0.0
    per_anchor = log_prob.masked_fill(~pos, 0.0).sum(1)[has] / npos[has]
    return -per_anchor.mean()


def _masked_supcon(
    z: torch.Tensor, y: torch.Tensor, temperature: float, real: torch.Tensor
) -> torch.Tensor:
    """``supcon_loss`` over the ``real`` rows only, as masked sums (anchors without a positive,
    and padded rows, get weight 0; no anchor at all gives 0)."""
    u = nn.functional.normalize(z, dim=1)
    eye = torch.eye(len(y), dtype=torch.bool, device=z.device)
    excluded = eye | ~real[None, :]
    sim = (u @ u.T / temperature).masked_fill(excluded, float("-inf"))
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    pos = (y[:, None] == y[None, :]) & ~excluded & real[:, None]
    npos = pos.sum(1)
    weight = (npos > 0).to(z.dtype)
    per_anchor = log_prob.masked_fill(~pos, 0.0).sum(1) / npos.clamp_min(1)
    return -(per_anchor * weight).sum() / weight.sum().clamp_min(1.0)


@register("supconfl")
class SupConFLClient(ClientAlgorithm):
    vectorisable = True
    model_needs = ("embedding", "head")

    class HParams(BaseHParams):
        beta: float = Field(1.0, ge=0.0)
        temperature: float = Field(0.1, gt=0.0)

    hp: HParams

    def loss(self, b: Batch) -> torch.Tensor:
        # l_ce + beta * SupCon(z; tau)   (docs/methods/supconfl.md), z = the classifier's input
        h = b.model.embedding(b.x)
        ce = cross_entropy(b.model.head(h), b.y, b.mask)
        rows = None if b.mask is None else b.mask.rows
        return ce + self.hp.beta * supcon_loss(h, b.y, self.hp.temperature, rows)
