"""FedFV: Federated Learning with Fair Averaging (Wang et al., IJCAI 2021)."""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field

from fedcore.core.aggregators._client_history import ClientHistory
from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


def project_internal(
    g: torch.Tensor, losses: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, int]:
    """FedFV's internal-conflict step (docs/methods/fedfv.md): the m x d matrix of projected g'_k.

    Clients are ordered by ascending loss; those from index ceil((m-1)(1-alpha)) on (the
    highest losses) keep g_k. Every other g'_k is projected, in that order, off each ORIGINAL
    g_j (j != k) it conflicts with at that moment. Returns (g', number of projections).
    """
    m = g.shape[0]
    order = torch.argsort(losses.detach().cpu(), stable=True).tolist()
    keep = set(order[math.ceil((m - 1) * (1 - alpha)) :]) if alpha > 0 else set()
    # coefficient space: g'_k = sum_j coef[k, j] g_j, so g_j . g'_k = (gram @ coef[k])_j and each
    # projection is exact on the m x m Gram matrix (float64)
    g64 = g.double()
    gram = (g64 @ g64.T).cpu()
    coef = torch.eye(m, dtype=torch.float64)
    projections = 0
    for k in range(m):
        if k in keep:
            continue
        for j in order:
            if j == k:
                continue
            dot = float(gram[j] @ coef[k])
            if dot < 0:  # g'_k <- g'_k - (g_j . g'_k / ||g_j||^2) g_j
                coef[k, j] -= dot / float(gram[j, j])
                projections += 1
    return coef.to(g) @ g, projections


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "fedfv/internal_projections": (
            "projections off conflicting gradients of this round's clients"
        ),
        "fedfv/external_projections": "projections off the recent history's conflicting gradients",
        "fedfv/norm_ratio": (
            "norm of the projected mean over the norm of the plain mean, before rescaling"
        ),
    },
}


@register("fedfv")
class FedFV(Aggregator):
    """docs/methods/fedfv.md, following the official easyFL ``flgo/algorithm/fedfv.py``.

    Internal conflicts: each client's pseudo-gradient, except those of the highest-loss clients,
    is projected off every conflicting ORIGINAL g_j in ascending-loss order. External conflicts:
    the mean is projected off the summed conflicting gradients of clients last seen at each of
    the last ``tau`` rounds (only once ``round >= tau``, rounds numbered from 1 as in the loop).
    The result is rescaled to ||mean_k g_k||.
    """

    class HParams(BaseHParams):
        alpha: float = Field(0.1, ge=0.0, le=1.0, description="share of clients kept unprojected")
        tau: int = Field(1, ge=0, description="rounds of history checked for external conflicts")
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    needs = frozenset({"loss_before"})

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.history = ClientHistory()

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        alpha, tau, t = self.hp.alpha, self.hp.tau, batch.round
        g = -batch.deltas  # pseudo-gradients g_k = theta_t - theta_k: the one sign flip
        # the history is updated before projecting, so h = 0 below is the current round
        self.history.update(batch.client_ids, g, t)

        g_proj, projections = project_internal(g, batch.stats["loss_before"], alpha)
        g_hat = g_proj.mean(dim=0)

        external = 0
        if t >= tau:  # round 1 included for tau = 1: flgo's current_round starts at 1 too
            for h in range(tau - 1, -1, -1):
                hist = self.history.seen_at(t - h, like=g)
                conflicting = hist[hist @ g_hat < 0]
                if conflicting.shape[0] == 0:
                    continue
                g_con = conflicting.sum(dim=0)
                dot = g_hat @ g_con
                if dot < 0:  # g_hat <- g_hat - (g_hat . G / ||G||^2) G
                    g_hat = g_hat - dot / (g_con @ g_con) * g_con
                    external += 1

        # ||g_hat|| = ||mean_k g_k||
        target, norm = g.mean(dim=0).norm(), g_hat.norm()
        g_hat = g_hat * (target / norm) if norm > 0 else torch.zeros_like(g_hat)
        metrics = {
            "fedfv/internal_projections": float(projections),
            "fedfv/external_projections": float(external),
            "fedfv/norm_ratio": float(norm / target) if target > 0 else 0.0,
        }
        return Aggregate(-self.hp.server_lr * g_hat, metrics)

    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)
