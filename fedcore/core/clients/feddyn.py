"""FedDyn client (Acar et al., ICLR 2021), docs/methods/feddyn.md.

Client k minimises L_k(theta) - <grad_k, theta> + (alpha/2)||theta - theta^{t-1}||^2, where
grad_k is its stored gradient estimate (zero before its first accepted update). In the shared
SGD that is a gradient shift of -grad_k and a proximal term with mu = alpha, so both engines
run it unchanged. Once the server has accepted the update, the client commits
grad_k <- grad_k - alpha (theta_k - theta^{t-1}), with the delta as the server received it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from pydantic import Field

from fedcore.core.clients.base import ClientAlgorithm, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records import LocalContext
from fedcore.core.records.plan import Commit, Finished, LocalPlan

GRADIENT = "feddyn_grad"  # grad_k in the client store (absent: 0)
ALPHA = "feddyn_alpha"  # the stat that tells the rule the shared alpha


def gradient_of(state: Mapping[str, Any], like: torch.Tensor) -> torch.Tensor:
    """The client's stored gradient estimate grad_k (zeros before its first accepted update)."""
    g = state.get(GRADIENT)
    return torch.zeros_like(like) if g is None else g.to(like)


@register("feddyn")
class FedDynClient(ClientAlgorithm):
    """Local SGD on the dynamically regularised objective; ``alpha`` is shared with the rule
    (sent as the ``feddyn_alpha`` stat)."""

    vectorisable = True

    class HParams(BaseHParams):
        alpha: float = Field(0.01, gt=0.0)

    hp: HParams

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """Plain minibatches, gradient shift -grad_k, proximal mu = alpha."""
        shift = -gradient_of(ctx.state, ctx.global_params)
        return replace(super().plan(ctx), shift=shift, mu=self.hp.alpha)

    def finish(self, done: Finished) -> None:
        done.update.stats[ALPHA] = self.hp.alpha

    def commit(self, c: Commit) -> None:
        """grad_k <- grad_k - alpha (theta_k - theta^{t-1}), only if accepted."""
        if not c.accepted:
            return
        delta = c.sent["delta"]
        c.state[GRADIENT] = gradient_of(c.state, delta) - self.hp.alpha * delta
