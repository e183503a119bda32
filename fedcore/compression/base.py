"""The compressor interface: what a client puts on the uplink, and how many bytes that is."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedcore.registry import HParams, Registry

REGISTRY: Registry[Compressor] = Registry("compressor", "compressor", "fedcore.compression")
register = REGISTRY.register


class Compressor:
    """Maps a client's delta to the delta the server receives; ``state`` is the client's store."""

    name: ClassVar[str]
    HParams: ClassVar[type[HParams]] = HParams

    def __init__(self, hparams: HParams | None = None) -> None:
        self.hp = hparams if hparams is not None else self.HParams()

    def compress(self, delta: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, int]:
        """Return (the delta as received by the server, bytes put on the wire)."""
        raise NotImplementedError
