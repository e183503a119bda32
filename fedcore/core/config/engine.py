"""The ``engine`` block: how clients are trained."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedcore.core.config.blocks import Strict


class EngineConfig(Strict):
    """How clients are trained (docs/how-to/gpu.md); ``engine=NAME`` sets ``backend``."""

    backend: Literal["auto", "sequential", "vectorised"] = "auto"
    max_clients_per_chunk: int | None = Field(None, ge=1)  # None: from free device memory
