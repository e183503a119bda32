"""The compressor interface: an operator C on one uplink vector and the bytes it puts on the
wire (docs/methods/compression.md).

A compressor knows nothing of rounds or clients: error feedback (its own registry axis,
`fedcore.core.stages.feedback`) and the uplink stage (`fedcore.core.stages.uplink`) wrap
it. It works with any client objective because it only changes what is sent.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams, Registry

REGISTRY: Registry[Compressor] = Registry(
    "compressor", "compressor", "fedcore.core.compression",
    "fedcore.core.compression.base:Compressor"
)
register = REGISTRY.register


class CompressionHParams(HParams):
    """Hyper-parameters of a compressor's operator (none for a parameter-free one)."""


class Compressor(Component):
    """An uplink operator ``apply``; ``randomized`` ones get a seeded generator per client."""

    name: ClassVar[str]
    HParams: ClassVar[type[CompressionHParams]] = CompressionHParams
    hp: CompressionHParams
    randomized: ClassVar[bool] = False


    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        """C(x): (x as the server receives it, bytes put on the wire)."""
        raise NotImplementedError


def side_bytes(buffers: dict[str, torch.Tensor]) -> int:
    """What a client sends besides its vectors: n_k as an int32 and its BatchNorm running
    statistics (the floating buffers) in fp16."""
    return 4 + 2 * sum(b.numel() for b in buffers.values())


def sparse_bytes(k: int) -> int:
    """k (index int32, value fp32) pairs."""
    return 8 * k
