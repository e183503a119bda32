"""QSGD (Alistarh et al. 2017): unbiased stochastic rounding of |x_i|/||x|| to ``levels`` levels."""

from __future__ import annotations

import math

import torch
from pydantic import Field

from fedcore.core.compression.base import CompressionHParams, Compressor, register


@register("qsgd")
class QSGD(Compressor):
    randomized = True

    class HParams(CompressionHParams):
        levels: int = Field(16, ge=1)

    hp: HParams

    def wire_bytes(self, d: int) -> int:
        """fp32 norm + per coordinate one sign bit and ceil(log2(levels + 1)) level bits."""
        return 4 + math.ceil(d * (1 + math.ceil(math.log2(self.hp.levels + 1))) / 8)

    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        s = self.hp.levels
        norm = x.norm()
        scaled = x.abs() / norm.clamp_min(torch.finfo(x.dtype).tiny) * s
        low = scaled.floor()
        u = torch.rand(x.numel(), generator=generator, dtype=x.dtype).to(x.device)
        level = low + (u < scaled - low).to(x.dtype)  # E[level] = scaled
        return norm * torch.sign(x) * level / s, self.wire_bytes(x.numel())
