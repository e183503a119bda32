"""The ``local`` block: how long and how fast clients train, and the learning-rate schedule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fedcore.core.config.blocks import Strict


class LocalConfig(Strict):
    epochs: int = Field(5, ge=1)
    steps: int | None = Field(None, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(0.05, gt=0)
    lr_decay: float = Field(1.0, gt=0, le=1)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    # warmup_cosine (docs/methods/fedavg.md): lr * r / warmup_rounds for r <= warmup_rounds, then
    # cosine from lr down to lr_min at the last round; lr_decay applies to ``constant`` only.
    lr_schedule: Literal["constant", "warmup_cosine"] = "constant"
    lr_min: float = Field(0.0, ge=0)
    warmup_rounds: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _schedule_knobs(self) -> LocalConfig:
        if self.lr_schedule == "warmup_cosine" and self.lr_decay != 1.0:
            raise ValueError("local.lr_decay: must be 1.0 with lr_schedule=warmup_cosine")
        if self.lr_min > self.lr:
            raise ValueError(f"local.lr_min: must be <= local.lr={self.lr} (got {self.lr_min})")
        return self
