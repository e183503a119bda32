"""The ``method`` block: the client objective, rule, compressor, sampler and stages."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from fedcore.core.config import limits
from fedcore.core.config.blocks import Recorded


class MethodConfig(Recorded):
    OPTIONAL: ClassVar[tuple[str, ...]] = ("sampler", "stages")

    name: str = Field("fedavg", min_length=1, max_length=limits.NAME_CHARS)
    client: dict[str, Any] = Field(default_factory=lambda: {"algorithm": "fedavg"})
    aggregator: dict[str, Any] = Field(default_factory=lambda: {"rule": "fedavg"})
    compression: dict[str, Any] = Field(default_factory=lambda: {"compressor": "none"})
    sampler: Any = Field(None, description="client sampler `{sampler: NAME, **hparams}` "
                         "(unset: uniform)")
    stages: Any = Field(None, description="stages around each update, each placed by its "
                        "side (client, wire, server): `[{stage: NAME, **hparams}]`")
