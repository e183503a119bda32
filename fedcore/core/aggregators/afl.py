"""AFL (Mohri, Sivek, Suresh, ICML 2019) with partial participation, docs/methods/afl.md.

Minimax over client mixtures: the server keeps lambda on the simplex of N clients, steps the
model with lambda-weighted deltas of the sampled clients, then ascends lambda along the
importance-weighted losses g_k = (N/m) F_k (F_k: the global model's train loss on client k
before local training), by Euclidean projection (default) or exponentiated (mirror) ascent.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, Requirement
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import Aggregate, UpdateBatch


def project_simplex(y: torch.Tensor, total: float = 1.0) -> torch.Tensor:
    """Euclidean projection of ``y`` onto {x >= 0, sum x = total} (Wang & Carreira-Perpinan
    2013): u sorted descending, C_j = sum_{r<=j} u_r, rho = max{j: u_j + (total - C_j)/j > 0},
    tau = (total - C_rho)/rho, x = max(y + tau, 0)."""
    u = torch.sort(y, descending=True).values
    cum = torch.cumsum(u, dim=0)
    j = torch.arange(1, len(y) + 1, dtype=y.dtype, device=y.device)
    rho = int(torch.nonzero(u + (total - cum) / j > 0).max()) + 1
    tau = (total - cum[rho - 1]) / rho
    return torch.clamp(y + tau, min=0.0)


def project_floored(y: torch.Tensor, floor: float) -> torch.Tensor:
    """Projection onto {lambda in simplex, lambda_k >= floor} (floor * N <= 1)."""
    if floor == 0.0:
        return project_simplex(y)
    return floor + project_simplex(y - floor, 1.0 - floor * len(y))


def lambda_step_too_large(lambda_lr: float, m: int, n: int) -> bool:
    """gamma > m / N^2: one round's projected step on a loss of ~1 outweighs the uniform level
    1/N, so lambda collapses onto the last sampled clients (docs/methods/afl.md)."""
    return lambda_lr > m / n**2


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "afl/lambda_max": "largest mixture weight lambda",
        "afl/lambda_entropy": "entropy of lambda",
        "afl/effective_clients": (
            "1 / sum lambda^2, the number of clients lambda effectively weights"
        ),
        "afl/zero_mass": "mass of lambda on clients at the lower bound",
        "afl/weighted_loss": "lambda-weighted loss of the sampled clients",
    },
}


@register("afl")
class AFL(Aggregator):
    needs = frozenset({"loss_before"})

    class HParams(BaseHParams):
        lambda_lr: float = Field(0.01, ge=0.0)
        update: Literal["projected", "exponentiated"] = "projected"
        weighting: Literal["normalized", "unbiased"] = "normalized"
        lambda_min: float = Field(0.0, ge=0.0)
        eval_model: Literal["last", "average"] = "last"
        server_lr: float = Field(1.0, gt=0.0)

    hp: HParams

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        """lambda_min x N <= 1 (the floor must fit in the simplex); a warning when the
        projected lambda step is too large for m of N clients per round."""
        assert isinstance(hp, cls.HParams)
        floor, lr = hp.lambda_min, hp.lambda_lr
        needs: list[Need] = [Requirement(
            ("dataset.num_clients",), lambda n: floor * n <= 1.0,
            lambda n: (f"method.aggregator.lambda_min: {floor} x {n} clients exceeds 1; "
                       f"allowed: at most {1.0 / n:g}"),
        )]
        if hp.update == "projected":
            needs.append(Requirement(
                ("clients_per_round", "dataset.num_clients"),
                lambda m, n: not lambda_step_too_large(lr, m, n),
                lambda m, n: (
                    f"afl: lambda_lr={lr:g} > m/N^2={m / n**2:g}: the projected lambda step is "
                    f"too large for {m} of {n} clients per round; lambda will collapse onto the "
                    "last sampled clients (use update=exponentiated or lambda_lr about m/N^2)"),
                warn_only=True,
            ))
        return needs

    def setup(self, num_clients: int, layout: ParamLayout) -> None:
        super().setup(num_clients, layout)
        self.lam = torch.full((num_clients,), 1.0 / num_clients, dtype=torch.float64)
        self.offset: torch.Tensor | None = None  # theta_bar - theta (eval_model: average)
        self.count = 0

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        hp, n = self.hp, self.num_clients
        losses = batch.stats["loss_before"].detach().double().cpu()
        ok = torch.isfinite(losses)  # a non-finite F_k drops the client from both steps
        ids = batch.client_ids.cpu()[ok]
        deltas = batch.deltas[ok.to(batch.deltas.device)]
        f, m = losses[ok], int(ok.sum())
        lam_s = self.lam[ids]
        zero_mass = float(lam_s.sum()) <= 1e-12
        if m == 0 or (hp.weighting == "normalized" and zero_mass):
            w = torch.zeros(m, dtype=torch.float64)
        elif hp.weighting == "normalized":
            w = lam_s / lam_s.sum()
        else:
            w = (n / m) * lam_s
        step = hp.server_lr * (w.to(deltas) @ deltas)
        g = torch.zeros(n, dtype=torch.float64)
        if m:
            g[ids] = (n / m) * f
        self.lam = self.ascend(g)
        ent = -(self.lam * torch.log(self.lam.clamp_min(1e-300))).sum()
        metrics = {
            "afl/lambda_max": float(self.lam.max()),
            "afl/lambda_entropy": float(ent),
            "afl/effective_clients": float(1.0 / (self.lam**2).sum()),
            "afl/zero_mass": float(zero_mass),
            "afl/weighted_loss": float((w * f).sum()),
        }
        if hp.eval_model == "average":
            self._track_average(step)
        return Aggregate(step, metrics)

    def ascend(self, g: torch.Tensor) -> torch.Tensor:
        """lambda <- Proj(lambda + lr g) or lambda * exp(lr g) / Z (in log space)."""
        if self.hp.update == "projected":
            return project_floored(self.lam + self.hp.lambda_lr * g, self.hp.lambda_min)
        z = torch.log(self.lam.clamp_min(1e-300)) + self.hp.lambda_lr * g
        lam = torch.softmax(z, dim=0)
        if self.hp.lambda_min:
            lam = project_floored(lam, self.hp.lambda_min)
        return lam

    def eval_params(self, params: torch.Tensor) -> torch.Tensor:
        """``average``: the running mean of theta_1..theta_t (the reference codes' output),
        kept as its offset from the current model: theta_bar = theta + offset."""
        if self.hp.eval_model == "last" or self.offset is None:
            return params
        return params + self.offset.to(params)

    def _track_average(self, step: torch.Tensor) -> None:
        """theta_bar <- theta_bar + (theta_new - theta_bar)/(t+1) in offset form:
        offset <- (offset - s) t/(t+1), with offset 0 after the first round."""
        t = self.count
        offset = torch.zeros_like(step) if self.offset is None else self.offset.to(step)
        self.offset = (offset - step) * (t / (t + 1))
        self.count = t + 1

    def state_dict(self) -> dict[str, Any]:
        offset = None if self.offset is None else self.offset.clone()
        return {"lambda": self.lam.clone(), "offset": offset, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lam = state["lambda"].clone()
        self.offset = None if state["offset"] is None else state["offset"].clone()
        self.count = int(state["count"])
