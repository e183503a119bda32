"""MOON client: model-contrastive learning (Li, He, Song, CVPR 2021; QinbinLi/MOON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from pydantic import Field
from torch import nn

from fedcore.core.clients.base import ClientAlgorithm, batch_mean, cross_entropy, register
from fedcore.core.clients.template import float_buffers
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.models.layout import flat_params
from fedcore.core.records import LocalContext
from fedcore.core.records.plan import Batch, Finished, LocalPlan

if TYPE_CHECKING:
    from fedcore.core.models import FedModel


def moon_contrastive(
    z: torch.Tensor,
    z_glob: torch.Tensor,
    z_prev: torch.Tensor,
    temperature: float,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """CE([cos(z, z_glob)/tau, cos(z, z_prev)/tau], target 0), averaged over the batch (over
    the real ``rows`` of a padded batch when given)."""
    cos = nn.functional.cosine_similarity
    logits = torch.stack([cos(z, z_glob, dim=-1), cos(z, z_prev, dim=-1)], 1) / temperature
    target = torch.zeros(len(z), dtype=torch.long, device=z.device)
    if rows is None:
        return nn.functional.cross_entropy(logits, target)
    return batch_mean(nn.functional.cross_entropy(logits, target, reduction="none"), rows)


@register("moon")
class MoonClient(ClientAlgorithm):
    """Each client keeps its last local model (``state["moon_prev"]``, buffer size 1). At a
    client's first participation there is no previous model and the loss is CE alone.

    The global and the previous model are the plan's frozen models: the vectorised
    engine shares the global one across a chunk and stacks the previous ones per client.
    """

    vectorisable = True
    model_needs = ("embedding", "head", "add_projection_head")

    class HParams(BaseHParams):
        mu: float = Field(1.0, ge=0.0)
        temperature: float = Field(0.5, gt=0.0)
        out_dim: int = Field(256, ge=1)

    hp: HParams

    @property
    def projection_dim(self) -> int:
        return self.hp.out_dim

    def prepare_model(self, model: FedModel) -> None:
        model.add_projection_head(self.hp.out_dim)  # the head is part of theta

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """Plain minibatches with two frozen models: the round's global model and this
        client's previous local model (none at the first participation, or with mu = 0: the
        loss is then CE alone)."""
        plan = super().plan(ctx)
        prev = ctx.state.get("moon_prev")
        if prev is None or self.hp.mu == 0:
            return plan
        plan.frozen = {
            "global": (ctx.global_params, ctx.global_buffers),
            "prev": (prev, ctx.state.get("moon_prev_buffers", {})),
        }
        return plan

    def loss(self, b: Batch) -> torch.Tensor:
        z = b.model.embedding(b.x)  # the projection head's output
        ce = cross_entropy(b.model.head(z), b.y, b.mask)
        frozen = b.ctx.frozen
        if "prev" not in frozen:
            return ce
        with torch.no_grad():
            z_glob = frozen["global"].embedding(b.x)
            z_prev = frozen["prev"].embedding(b.x)
        rows = None if b.mask is None else b.mask.rows
        # l = CE + mu * CE([cos(z,z_glob)/tau, cos(z,z_prev)/tau], 0)   (docs/methods/moon.md)
        return ce + self.hp.mu * moon_contrastive(z, z_glob, z_prev, self.hp.temperature, rows)

    def finish(self, done: Finished) -> None:
        """Keep the local model as next participation's previous model."""
        done.ctx.state["moon_prev"] = flat_params(done.model).clone()
        done.ctx.state["moon_prev_buffers"] = float_buffers(done.model)
