"""RFA / geometric median (Pillutla, Kakade, Harchaoui, IEEE TSP 2022): smoothed Weiszfeld."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.aggregators.base import Aggregate, Aggregator, UpdateBatch, register
from fedcore.registry import HParams as BaseHParams


def smoothed_weiszfeld(
    deltas: torch.Tensor, alpha: torch.Tensor, iterations: int, nu: float, tol: float
) -> tuple[torch.Tensor, int]:
    """Approximate argmin_v sum_k alpha_k max(nu, ||v - Delta_k||); returns (v, steps run).

    Stops early when the relative decrease of the objective falls below ``tol`` (0 = never).
    """
    v = alpha @ deltas  # v^0 = sum_k alpha_k Delta_k
    dist = torch.linalg.vector_norm(deltas - v, dim=1)
    objective = float(alpha @ dist) if tol > 0 else 0.0
    steps = 0
    for _ in range(iterations):
        beta = alpha / dist.clamp(min=nu)  # beta_k = alpha_k / max(nu, ||v - Delta_k||)
        v = (beta @ deltas) / beta.sum()  # v <- sum beta_k Delta_k / sum beta_k
        steps += 1
        dist = torch.linalg.vector_norm(deltas - v, dim=1)
        if tol > 0:  # [OUR CHOICE] early stop on the relative objective decrease
            new_objective = float(alpha @ dist)
            if objective - new_objective < tol * max(objective, 1e-30):
                break
            objective = new_objective
    return v, steps


@register("rfa")
class RFA(Aggregator):
    """Robust federated aggregation: R smoothed Weiszfeld steps with alpha_k = p_k."""

    class HParams(BaseHParams):
        iterations: int = Field(3, ge=0, description="R, Weiszfeld steps")
        nu: float = Field(1e-6, gt=0.0, description="smoothing")
        tol: float = Field(0.0, ge=0.0, description="relative-objective early stop; 0 = off")
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        # docs/methods/rfa.md: theta_{t+1} = theta_t + v, v the smoothed Weiszfeld estimate
        hp = self.hp
        v, steps = smoothed_weiszfeld(batch.deltas, batch.weights, hp.iterations, hp.nu, hp.tol)
        metrics = {"rfa/iterations_run": float(steps)}
        return Aggregate(hp.server_lr * v, metrics)


@register("geometric_median")
class GeometricMedian(RFA):
    """The same estimator as RFA run (close) to convergence."""

    class HParams(RFA.HParams):  # RFA's fields, run longer by default
        iterations: int = Field(100, ge=0, description="maximum Weiszfeld steps")
        tol: float = Field(1e-5, ge=0.0, description="relative-objective early stop")

    hp: HParams

