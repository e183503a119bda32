"""No compression: the dense fp32 delta goes on the wire."""

from __future__ import annotations

import torch

from fedcore.core.compression.base import Compressor, register


@register("none")
class Identity(Compressor):
    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        return x, x.numel() * x.element_size()
