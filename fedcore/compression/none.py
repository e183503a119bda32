"""No compression: the dense fp32 delta goes on the wire."""

from __future__ import annotations

from typing import Any

import torch

from fedcore.compression.base import Compressor, register


@register("none")
class Identity(Compressor):
    def compress(self, delta: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, int]:
        return delta, delta.numel() * delta.element_size()
