"""MOON client: model-contrastive learning (Li, He, Song, CVPR 2021; QinbinLi/MOON)."""

from __future__ import annotations

import copy

import torch
from pydantic import Field
from torch import nn

from fedcore.clients.base import ClientAlgorithm, LocalContext, register
from fedcore.layout import flat_params, load_flat_params
from fedcore.registry import HParams


def moon_contrastive(
    z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, temperature: float
) -> torch.Tensor:
    """CE([cos(z, z_glob)/tau, cos(z, z_prev)/tau], target 0), averaged over the batch."""
    cos = nn.functional.cosine_similarity
    logits = torch.stack([cos(z, z_glob, dim=-1), cos(z, z_prev, dim=-1)], 1) / temperature
    return nn.functional.cross_entropy(
        logits, torch.zeros(len(z), dtype=torch.long, device=z.device)
    )


def _frozen(model: nn.Module, params: torch.Tensor, buffers: dict[str, torch.Tensor]):
    """An eval-mode, gradient-free copy of ``model`` holding ``params`` and ``buffers``."""
    twin = copy.deepcopy(model)
    load_flat_params(twin, params)
    if buffers:
        twin.load_state_dict(buffers, strict=False)
    return twin.requires_grad_(False).eval()


@register("moon")
class MoonClient(ClientAlgorithm):
    """Each client keeps its last local model (``state["moon_prev"]``, buffer size 1). At a
    client's first participation there is no previous model and the loss is CE alone."""

    not_vectorised = (
        "its loss runs each client's own frozen previous model beside the global one, a second "
        "per-client model the vectorised engine does not stack"
    )

    class HParams(HParams):
        mu: float = Field(1.0, ge=0.0)
        temperature: float = Field(0.5, gt=0.0)
        out_dim: int = Field(256, ge=1)

    @property
    def projection_dim(self) -> int:
        return self.hp.out_dim

    def prepare_model(self, model: nn.Module) -> None:
        model.add_projection_head(self.hp.out_dim)  # the head is part of theta

    def begin_training(self, model: nn.Module, ctx: LocalContext) -> None:
        prev = ctx.state.get("moon_prev")
        self._glob = self._prev = None
        if prev is not None and self.hp.mu > 0:
            self._glob = _frozen(model, ctx.global_params, ctx.global_buffers)
            self._prev = _frozen(model, prev, ctx.state.get("moon_prev_buffers", {}))

    def loss(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: LocalContext
    ) -> torch.Tensor:
        z = model.embedding(x)  # the projection head's output
        ce = nn.functional.cross_entropy(model.head(z), y)
        if self._prev is None:
            return ce
        with torch.no_grad():
            z_glob, z_prev = self._glob.embedding(x), self._prev.embedding(x)
        # l = CE + mu * CE([cos(z,z_glob)/tau, cos(z,z_prev)/tau], 0)   (docs/methods/moon.md)
        return ce + self.hp.mu * moon_contrastive(z, z_glob, z_prev, self.hp.temperature)

    def end_training(self, model: nn.Module, ctx: LocalContext, stats: dict[str, float]) -> None:
        ctx.state["moon_prev"] = flat_params(model).clone()
        ctx.state["moon_prev_buffers"] = {
            k: v.detach().clone() for k, v in model.named_buffers() if v.dtype.is_floating_point
        }
        self._glob = self._prev = None
