"""Rand-k: k uniformly random coordinates, unscaled (contractive in expectation, delta = d/k)."""

from __future__ import annotations

import torch

from fedcore.core.compression.base import register
from fedcore.core.compression.topk import SparseK


@register("randk")
class RandK(SparseK):
    randomized = True

    def indices(self, x: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
        return torch.randperm(x.numel(), generator=generator)[:k].to(x.device)
