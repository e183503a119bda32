"""Scaled sign: C(x) = (||x||_1 / d) sign(x); contractive, delta = d ||x||^2 / ||x||_1^2 <= d."""

from __future__ import annotations

import math

import torch

from fedcore.core.compression.base import Compressor, register


@register("sign")
class ScaledSign(Compressor):
    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        scale = x.abs().mean()
        return scale * torch.sign(x), math.ceil(x.numel() / 8) + 4  # 1 bit each + fp32 scale
