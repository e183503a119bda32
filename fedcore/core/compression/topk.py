"""Top-k over the whole flat vector, k = max(1, floor(k_frac d)) (docs/methods/compression.md)."""

from __future__ import annotations

import math

import torch
from pydantic import Field

from fedcore.core.compression.base import CompressionHParams, Compressor, register, sparse_bytes


def num_kept(k_frac: float, d: int) -> int:
    return max(1, math.floor(k_frac * d))


class SparseK(Compressor):
    """Keeps k = max(1, floor(k_frac d)) coordinates chosen by ``indices``; 8k bytes on the wire."""

    class HParams(CompressionHParams):
        k_frac: float = Field(0.01, gt=0.0, le=1.0)

    hp: HParams

    def indices(self, x: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError

    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        k = num_kept(self.hp.k_frac, x.numel())
        idx = self.indices(x, k, generator)
        out = torch.zeros_like(x)
        out[idx] = x[idx]
        return out, sparse_bytes(k)


@register("topk")
class TopK(SparseK):
    """Keeps the k largest-magnitude entries; contractive with delta = d/k."""

    def indices(self, x: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
        return torch.topk(x.abs(), k, sorted=False).indices
