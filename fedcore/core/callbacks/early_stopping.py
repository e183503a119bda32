"""Early stopping: the run finishes (converged) once a validation metric has not improved for
``patience`` evaluations in a row (``callbacks: [{callback: early_stopping, patience: 5}]``).

It monitors a validation metric (``val/...``, measured on the split ``dataset.val_fraction``
holds out), never the test set: a test-set monitor is refused when the config is loaded. Its
best value, best round and count of evaluations without improvement are checkpointed, so a
resumed run stops where an uninterrupted one would."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from fedcore.core.callbacks.base import RoundRecord, RoundVerdict
from fedcore.core.callbacks.configured import ConfiguredCallback, register
from fedcore.core.component.registry import HParams
from fedcore.core.component.registry import HParams as AnyHParams
from fedcore.core.component.requirements import Need, Requirement

VALIDATION = ("val/accuracy", "val/loss")


class EarlyStoppingHParams(HParams):
    patience: int = Field(5, ge=1, description="evaluations without improvement before stopping")
    monitor: str = Field("val/accuracy", description="the validation metric watched")
    mode: Literal["max", "min"] = Field("max", description="max: higher is better; min: lower")
    min_delta: float = Field(0.0, ge=0.0, description="smallest change counted as improvement")

    @field_validator("monitor")
    @classmethod
    def _validation_only(cls, monitor: str) -> str:
        if monitor not in VALIDATION:
            raise ValueError(
                f"early stopping monitors a validation metric, never the test set; allowed: "
                f"{', '.join(VALIDATION)}"
            )
        return monitor


@register("early_stopping")
class EarlyStopping(ConfiguredCallback):
    HParams: ClassVar[type[HParams]] = EarlyStoppingHParams
    hp: EarlyStoppingHParams

    def __init__(self, hparams: AnyHParams | None = None) -> None:
        super().__init__(hparams)
        self.best = math.nan
        self.best_round = 0
        self.bad = 0  # evaluations since the best one

    @classmethod
    def requirements(cls, hp: Any) -> list[Need]:
        return [Requirement(
            ("dataset.val_fraction",), lambda v: v > 0,
            lambda v: f"dataset.val_fraction: early_stopping monitors {hp.monitor}, which needs "
                      f"a validation split; set it above 0 (got {v})",
        )]

    def _improves(self, value: float) -> bool:
        if math.isnan(self.best):
            return True
        if self.hp.mode == "max":
            return value > self.best + self.hp.min_delta
        return value < self.best - self.hp.min_delta

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        value = record.metrics.get(self.hp.monitor)
        if value is None or math.isnan(value):  # not an evaluated round
            return None
        if self._improves(value):
            self.best, self.best_round, self.bad = float(value), record.round, 0
            return None
        self.bad += 1
        if self.bad < self.hp.patience:
            return None
        return RoundVerdict(finish=(
            f"early_stopping: {self.hp.monitor} did not improve for {self.bad} evaluations "
            f"(best {self.best:.6g} at round {self.best_round}); stopped after round "
            f"{record.round}"
        ))

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_round": self.best_round, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = float(state.get("best", math.nan))
        self.best_round = int(state.get("best_round", 0))
        self.bad = int(state.get("bad", 0))
