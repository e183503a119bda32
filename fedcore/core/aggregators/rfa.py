"""RFA / geometric median (Pillutla, Kakade, Harchaoui, IEEE TSP 2022): smoothed Weiszfeld."""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.aggregators.coordinate import coordinate_median
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


def smoothed_weiszfeld(
    deltas: torch.Tensor, alpha: torch.Tensor, iterations: int, nu: float, tol: float
) -> tuple[torch.Tensor, int]:
    """Approximate argmin_v sum_k alpha_k max(nu, ||v - Delta_k||); returns (v, steps run).

    Stops early when the relative decrease of the objective falls below ``tol`` (0 = never).
    Computed in float64: the squared norm of finite float32 deltas as large as 1e30 (an
    attacker's) overflows float32 but not float64, so every beta_k stays finite and an
    attacker's share beta_k / sum beta shrinks with its distance; v is returned in the deltas'
    dtype (a convex combination of them, so finite).
    """
    x, a = deltas.double(), alpha.to(deltas.device, torch.float64)
    v = weiszfeld_start(x, a)
    dist = torch.linalg.vector_norm(x - v, dim=1)
    objective = float(a @ dist) if tol > 0 else 0.0
    steps = 0
    for _ in range(iterations):
        beta = a / dist.clamp(min=nu)  # beta_k = alpha_k / max(nu, ||v - Delta_k||)
        beta = beta / beta.max()  # the same v, without under/overflow of sum beta
        v = (beta @ x) / beta.sum()  # v <- sum beta_k Delta_k / sum beta_k
        steps += 1
        dist = torch.linalg.vector_norm(x - v, dim=1)
        if tol > 0:  # [OUR CHOICE] early stop on the relative objective decrease
            new_objective = float(a @ dist)
            if objective - new_objective < tol * max(objective, 1e-30):
                break
            objective = new_objective
    return v.to(deltas.dtype), steps


def weiszfeld_start(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """v^0: the weighted mean (the paper's start), or the coordinate-wise median when that has
    the lower objective sum_k alpha_k ||v - Delta_k|| [OUR CHOICE]. Weiszfeld only lowers the
    objective, so the better start can only help; it matters against distant attackers, who
    drag the mean ~their weight x their distance away and R = 3 steps from there do not come
    back (each step shrinks that offset only by about attacker weight / honest weight)."""
    mean = alpha @ x
    median = coordinate_median(x, dim=0)
    at_mean = alpha @ torch.linalg.vector_norm(x - mean, dim=1)
    at_median = alpha @ torch.linalg.vector_norm(x - median, dim=1)
    return median if bool(at_median < at_mean) else mean


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "rfa/iterations_run": "smoothed Weiszfeld iterations run",
    },
}


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

