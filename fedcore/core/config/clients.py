"""The ``clients`` block: noisy-label and Byzantine clients."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedcore.core.config.blocks import Strict


class ClientsConfig(Strict):
    """Misbehaving clients, to evaluate robust rules (none by default)."""

    noisy_fraction: float = Field(0.0, ge=0, le=1)
    noise_rate: float = Field(0.4, ge=0, le=1)
    byzantine_fraction: float = Field(0.0, ge=0, lt=1)
    attack: Literal["sign_flip", "scale", "gaussian"] = "sign_flip"
    attack_strength: float = Field(3.0, gt=0)
