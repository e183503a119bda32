"""CSER (Xie et al. 2020): EF whose residuals are partly reset every ``H`` rounds; the top
``reset_frac`` entries travel to the server as a digest whose mean is an extra server step
(docs/methods/compression.md)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field

from fedcore.core.component.registry import HParams
from fedcore.core.compression.topk import num_kept
from fedcore.core.records import Closing
from fedcore.core.records.store import ClientStore
from fedcore.core.stages.feedback.base import register
from fedcore.core.stages.feedback.residual import RESIDUAL, ResidualFeedback, ResidualHParams

DIGEST = "cser_digest"
DIGEST_ROUND = "cser_digest_round"


class CSERHParams(ResidualHParams):
    H: int = Field(default=5, ge=1)
    reset_frac: float = Field(default=0.1, gt=0.0, le=1.0)


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "cser/reset": "1 in the rounds CSER sends its residual digest (every H rounds)",
    },
}


@register("cser")
class CSER(ResidualFeedback):
    HParams: ClassVar[type[HParams]] = CSERHParams
    hp: CSERHParams
    fixed_alpha = 0.0

    def after_residual(self, residual: torch.Tensor, state: dict[str, Any]) -> int:
        """On a reset round the top-k1 residual entries move to a digest for the server."""
        if self.round % self.hp.H:
            return 0
        k1 = num_kept(self.hp.reset_frac, residual.numel())
        idx = torch.topk(residual.abs(), k1, sorted=False).indices
        digest = torch.zeros_like(residual)
        digest[idx] = residual[idx]
        residual[idx] = 0.0
        state[DIGEST], state[DIGEST_ROUND] = digest, self.round
        return 8 * k1

    def end_round(
        self, client_ids: list[int], store: ClientStore, closing: Closing
    ) -> dict[str, float]:
        """On a reset round the senders' digest mean e_bar is an extra server step, applied to
        the model after the rule's step."""
        metrics = super().end_round(client_ids, store, closing)
        reset = self.round % self.hp.H == 0
        metrics["cser/reset"] = float(reset)
        senders = [s for s in (store[k] for k in client_ids) if s.get(DIGEST_ROUND) == self.round]
        if not reset or not senders:
            return metrics
        e_bar = torch.stack([s[DIGEST] for s in senders]).sum(0) / len(senders)  # uniform mean
        for s in senders:  # reconciliation e <- e + (last_sent - e_bar), once e_bar is known
            s[RESIDUAL] = s[RESIDUAL] + (s.pop(DIGEST) - e_bar)
            del s[DIGEST_ROUND]
        closing.params = closing.params + e_bar  # applied to w like the main update
        return metrics
