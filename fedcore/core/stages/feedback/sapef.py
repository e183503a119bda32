"""SA-PEF: a partial step ahead w - alpha e, alpha constant (``alpha_r``) or per client from
the local steps T (``alpha_schedule: theory``, docs/methods/sapef.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from fedcore.core.component.registry import HParams
from fedcore.core.stages.feedback.base import register
from fedcore.core.stages.feedback.residual import ResidualFeedback, ResidualHParams, alpha_star

if TYPE_CHECKING:
    from fedcore.core.records import LocalSchedule


class SAPEFHParams(ResidualHParams):
    alpha_r: float = Field(default=0.85, ge=0.0, le=1.0)
    alpha_schedule: Literal["constant", "theory"] = "constant"
    L: float = Field(default=1.0, gt=0.0)


@register("sapef")
class SAPEF(ResidualFeedback):
    HParams: ClassVar[type[HParams]] = SAPEFHParams
    hp: SAPEFHParams

    @property
    def per_client_alpha(self) -> bool:  # type: ignore[override]
        """alpha_schedule "theory": alpha depends on the local steps T each client takes."""
        return self.hp.alpha_schedule == "theory"

    def alpha_for(self, schedule: LocalSchedule, num_steps: int | None) -> float:
        if self.hp.alpha_schedule == "theory":
            return alpha_star(schedule.lr, self.hp.L, num_steps) if num_steps else 0.0
        return self.hp.alpha_r
