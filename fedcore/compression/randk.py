"""Rand-k: k uniformly random coordinates, unscaled (contractive in expectation, delta = d/k)."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.compression.base import CompressionHParams, Compressor, register, sparse_bytes
from fedcore.compression.topk import num_kept


@register("randk")
class RandK(Compressor):
    randomized = True

    class HParams(CompressionHParams):
        k_frac: float = Field(0.01, gt=0.0, le=1.0)

    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        k = num_kept(self.hp.k_frac, x.numel())
        idx = torch.randperm(x.numel(), generator=generator)[:k].to(x.device)
        out = torch.zeros_like(x)
        out[idx] = x[idx]
        return out, sparse_bytes(k)
