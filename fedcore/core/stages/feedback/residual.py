"""Residual error feedback in alpha: EF (0), SAEF (1), SA-PEF (alpha_r), CSER (0, with resets)
(docs/methods/compression.md).

Sign convention (docs/explanation/architecture.md): deltas are ``local - global``, so the
stored residual is the paper's ``-e``. The paper's step-ahead start ``w_r - alpha e`` is
``w_r + alpha * residual`` here, and ``u = (1 - alpha) e + g`` with ``g = w_r - w_T`` is
``u = delta + (1 - alpha) * residual`` with ``delta = w_T - w_r`` measured from the UN-shifted
global model (docs/methods/compression.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field

from fedcore.core.component.registry import HParams
from fedcore.core.component.registry import HParams as AnyHParams
from fedcore.core.numerics.bn_statistics import average_bn_statistics
from fedcore.core.numerics.finite import all_finite
from fedcore.core.stages.feedback.base import ErrorFeedback, Operator

if TYPE_CHECKING:
    from fedcore.core.records import Closing, LocalSchedule, StageContext
    from fedcore.core.records.store import ClientStore

RESIDUAL = "ef_residual"
ALPHA = "ef_alpha"  # the client's alpha of the current round (alpha_schedule "theory")


def alpha_star(lr: float, L: float, T: int) -> float:
    """clip(1 / (1 + 12 (eta_r L T)^2), 0.6, 0.9): rho_r's minimiser, clipped (sapef.md)."""
    s = lr * L * T
    return min(max(1.0 / (1.0 + 12.0 * s * s), 0.6), 0.9)


class ResidualHParams(HParams):
    """Every residual variant measures the gradient mismatch at ``w - probe_alpha e``."""

    probe_alpha: float = Field(default=1.0, ge=0.0)


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "sapef/residual_norm_mean": (
            "mean norm of the sampled clients' error-feedback residuals (EF, SAEF, SA-PEF, CSER)"
        ),
        "sapef/alpha": "mean step-ahead coefficient alpha_r of the sampled clients",
    },
}


class ResidualFeedback(ErrorFeedback):
    """Per-client residual bookkeeping; the residual lives in the client's store entry.

    ``fixed_alpha`` is the variant's alpha; SA-PEF overrides ``alpha_for``."""

    HParams: ClassVar[type[HParams]] = ResidualHParams
    hp: ResidualHParams
    fixed_alpha: ClassVar[float] = 0.0

    def __init__(self, hparams: AnyHParams | None = None) -> None:
        super().__init__(hparams)
        self.alpha = 0.0
        self.schedule: LocalSchedule | None = None

    def begin_round(self, round: int, schedule: LocalSchedule) -> None:
        self.round = round
        self.schedule = schedule
        self.alpha = self.alpha_for(schedule, schedule.steps)

    def alpha_for(self, schedule: LocalSchedule, num_steps: int | None) -> float:
        """The round's alpha; a per-client schedule needs T = ``num_steps``."""
        return self.fixed_alpha

    def client_alpha(self, state: dict[str, Any]) -> float:
        return state.get(ALPHA, self.alpha) if self.per_client_alpha else self.alpha

    def probe(self, rc: StageContext, sampled: list[int]) -> dict[str, float]:
        from fedcore.core.stages.feedback.mismatch import round_gradient_mismatch

        if self.round % rc.cfg.eval_every:
            return {}
        residuals = [rc.store[k].get(RESIDUAL) for k in sampled]
        return round_gradient_mismatch(rc, sampled, residuals, self.hp.probe_alpha)

    def start_point(
        self, global_params: torch.Tensor, state: dict[str, Any], num_steps: int | None = None
    ) -> torch.Tensor | None:
        """The step-ahead start w_r - alpha e; ``num_steps`` (T of this client) sets alpha
        under a per-client schedule."""
        if self.per_client_alpha and num_steps is not None:
            assert self.schedule is not None  # set by begin_round
            state[ALPHA] = self.alpha_for(self.schedule, num_steps)
        alpha = self.client_alpha(state)
        residual: torch.Tensor | None = state.get(RESIDUAL)
        if residual is None or alpha == 0.0:
            return None
        return global_params + alpha * residual  # preview w_r - alpha e (compression.md)

    def compress(
        self,
        op: Operator,
        delta: torch.Tensor,
        state: dict[str, Any],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, int]:
        residual, alpha = state.get(RESIDUAL), self.client_alpha(state)
        u = delta if residual is None else delta + (1.0 - alpha) * residual  # compression.md
        sent, nbytes = op(u, generator)  # step 6
        if not all_finite(u):
            return sent, nbytes  # dropped by the loop; the residual stays as it was
        new = u - sent  # step 7
        nbytes += self.after_residual(new, state)
        state[RESIDUAL] = new
        return sent, nbytes

    def after_residual(self, residual: torch.Tensor, state: dict[str, Any]) -> int:
        """A variant's extra work on the new residual (in place); the bytes it sends."""
        return 0

    def end_round(
        self, client_ids: list[int], store: ClientStore, closing: Closing
    ) -> dict[str, float]:
        """The residual metrics; the BatchNorm variances moment-matched, as the reference code
        of the residual methods does (docs/methods/sapef.md)."""
        if closing.client_buffers and closing.weights is not None:
            closing.buffers = average_bn_statistics(closing.client_buffers, closing.weights,
                                                    moment_match=True)
        states = [store[k] for k in client_ids]
        norms = [float(s[RESIDUAL].norm()) for s in states if RESIDUAL in s]
        alphas = [self.client_alpha(s) for s in states]
        metrics = {
            "sapef/residual_norm_mean": float(sum(norms) / max(len(norms), 1)),
            "sapef/alpha": float(sum(alphas) / max(len(alphas), 1)),
        }
        return metrics
