"""Error feedback in alpha_r: EF (0), SAEF (1), SA-PEF (alpha), CSER (docs/methods/compression.md).

Sign convention (docs/explanation/architecture.md): deltas are ``local - global``, so the
stored residual is the paper's ``-e``. The paper's step-ahead start ``w_r - alpha e`` is
``w_r + alpha * residual`` here, and ``u = (1 - alpha) e + g`` with ``g = w_r - w_T`` is
``u = delta + (1 - alpha) * residual`` with ``delta = w_T - w_r`` measured from the UN-shifted
global model (docs/methods/compression.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fedcore.compression.base import CompressionHParams, RoundEnd
from fedcore.compression.topk import num_kept

if TYPE_CHECKING:
    from fedcore.clients.base import LocalSchedule
    from fedcore.store import ClientStore

RESIDUAL = "ef_residual"
ALPHA = "ef_alpha"  # the client's alpha of the current round (alpha_schedule "theory")
DIGEST = "cser_digest"
DIGEST_ROUND = "cser_digest_round"

Operator = Callable[[torch.Tensor, torch.Generator | None], tuple[torch.Tensor, int]]


def alpha_star(lr: float, L: float, T: int) -> float:
    """clip(1 / (1 + 12 (eta_r L T)^2), 0.6, 0.9): rho_r's minimiser, clipped (sapef.md)."""
    s = lr * L * T
    return min(max(1.0 / (1.0 + 12.0 * s * s), 0.6), 0.9)


class ErrorFeedback:
    """Per-client residual bookkeeping; the residual lives in the client's store entry."""

    def __init__(self, hp: CompressionHParams) -> None:
        self.hp = hp
        self.variant: str = hp.error_feedback
        self.round = 0
        self.alpha = 0.0
        self.schedule: LocalSchedule | None = None

    @property
    def active(self) -> bool:
        return self.variant != "none"

    @property
    def per_client_alpha(self) -> bool:
        """alpha_schedule "theory": alpha depends on the local steps T each client takes."""
        return self.variant == "sapef" and self.hp.alpha_schedule == "theory"

    def begin_round(self, round: int, schedule: LocalSchedule) -> None:
        self.round = round
        self.schedule = schedule
        self.alpha = self.alpha_for(schedule, schedule.steps)

    def alpha_for(self, schedule: LocalSchedule, num_steps: int | None) -> float:
        """The round's alpha; "theory" needs T = ``num_steps``, the local steps taken."""
        if self.variant in ("none", "ef", "cser"):
            return 0.0
        if self.variant == "saef":
            return 1.0
        if self.hp.alpha_schedule == "theory":
            return alpha_star(schedule.lr, self.hp.L, num_steps) if num_steps else 0.0
        return self.hp.alpha_r

    def client_alpha(self, state: dict[str, Any]) -> float:
        return state.get(ALPHA, self.alpha) if self.per_client_alpha else self.alpha

    def start_point(
        self, global_params: torch.Tensor, state: dict[str, Any], num_steps: int | None = None
    ) -> torch.Tensor | None:
        """The step-ahead start w_r - alpha e; ``num_steps`` (T of this client) sets alpha
        under the "theory" schedule."""
        if self.per_client_alpha and num_steps is not None:
            assert self.schedule is not None  # set by begin_round
            state[ALPHA] = self.alpha_for(self.schedule, num_steps)
        alpha = self.client_alpha(state)
        residual: torch.Tensor | None = state.get(RESIDUAL)
        if not self.active or residual is None or alpha == 0.0:
            return None
        return global_params + alpha * residual  # preview w_r - alpha e (compression.md)

    def compress(
        self,
        op: Operator,
        delta: torch.Tensor,
        state: dict[str, Any],
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, int]:
        if not self.active:
            return op(delta, generator)
        residual, alpha = state.get(RESIDUAL), self.client_alpha(state)
        u = delta if residual is None else delta + (1.0 - alpha) * residual  # compression.md
        sent, nbytes = op(u, generator)  # step 6
        if not torch.isfinite(u).all():
            return sent, nbytes  # dropped by the loop; the residual stays as it was
        new = u - sent  # step 7
        if self.variant == "cser" and self.round % self.hp.H == 0:
            nbytes += self._cser_digest(new, state)
        state[RESIDUAL] = new
        return sent, nbytes

    def _cser_digest(self, residual: torch.Tensor, state: dict[str, Any]) -> int:
        """CSER: the top-k1 residual entries move to a digest for the server (compression.md)."""
        k1 = num_kept(self.hp.reset_frac, residual.numel())
        idx = torch.topk(residual.abs(), k1, sorted=False).indices
        digest = torch.zeros_like(residual)
        digest[idx] = residual[idx]
        residual[idx] = 0.0
        state[DIGEST], state[DIGEST_ROUND] = digest, self.round
        return 8 * k1

    def end_round(self, client_ids: list[int], store: ClientStore) -> RoundEnd:
        if not self.active:
            return RoundEnd()
        states = [store[k] for k in client_ids]
        norms = [float(s[RESIDUAL].norm()) for s in states if RESIDUAL in s]
        alphas = [self.client_alpha(s) for s in states]
        metrics = {
            "sapef/residual_norm_mean": float(sum(norms) / max(len(norms), 1)),
            "sapef/alpha": float(sum(alphas) / max(len(alphas), 1)),
        }
        if self.variant != "cser":
            return RoundEnd(None, metrics)
        reset = self.round % self.hp.H == 0
        metrics["cser/reset"] = float(reset)
        senders = [s for s in states if s.get(DIGEST_ROUND) == self.round]
        if not reset or not senders:
            return RoundEnd(None, metrics)
        e_bar = torch.stack([s[DIGEST] for s in senders]).sum(0) / len(senders)  # uniform mean
        for s in senders:  # reconciliation e <- e + (last_sent - e_bar), once e_bar is known
            s[RESIDUAL] = s[RESIDUAL] + (s.pop(DIGEST) - e_bar)
            del s[DIGEST_ROUND]
        return RoundEnd(e_bar, metrics)  # applied to w like the main update
