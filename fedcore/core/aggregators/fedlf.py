"""FedLF: layer-wise fair federated learning (Pan et al., AAAI 2024)."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from fedcore.core.aggregators._client_history import ClientHistory
from fedcore.core.aggregators._min_norm import min_norm_weights
from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

# ||h|| * ||l|| below this is float64 rounding of an exactly zero h (all losses equal)
_H_REL_TOL = 1e-12


def fairness_vector(losses: torch.Tensor) -> torch.Tensor:
    """h = (l.pi) l / ||l||^3 - pi / ||l||, pi = 1/sqrt(m) 1 (docs/methods/fedlf.md), float64.

    h is orthogonal to l and vanishes exactly when all losses are equal (then h = 0 is
    returned, not rounding noise); an all-zero loss vector also gives h = 0.
    """
    l = losses.detach().to("cpu", torch.float64)
    l_norm = l.norm()
    if l_norm == 0:
        return torch.zeros_like(l)
    pi = torch.full_like(l, l.numel() ** -0.5)
    h = (l @ pi) * l / l_norm**3 - pi / l_norm
    return h if h.norm() * l_norm > _H_REL_TOL else torch.zeros_like(h)


def _rescaled_rows(parts: list[torch.Tensor], mu: torch.Tensor) -> torch.Tensor:
    """The non-zero rows of ``parts``, in order, each rescaled to norm mu (zero rows have no
    direction and are dropped), written into one matrix without an intermediate copy."""
    kept = []
    for rows in parts:
        norms: torch.Tensor = rows.norm(dim=1)
        nz = norms > 0
        if bool(nz.all()):
            kept.append((rows, (mu / norms).unsqueeze(1)))
        else:
            kept.append((rows[nz], (mu / norms[nz]).unsqueeze(1)))
    out = parts[0].new_empty((sum(len(r) for r, _ in kept), parts[0].shape[1]))
    start = 0
    for rows, factor in kept:
        torch.mul(rows, factor, out=out[start : start + len(rows)])
        start += len(rows)
    return out


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "fedlf/history_rows": "history gradients of recently offline clients in the QP",
        "fedlf/halvings": "halvings of the direction by the float guard",
        "fedlf/fallback": "1 when the guard fell back to the QP's direction",
        "fedlf/qp_nonoptimal": "layer QPs cvxopt did not solve to optimality",
        "fedlf/min_cos": "smallest cosine between a client pseudo-gradient and the direction",
    },
}


@register("fedlf")
class FedLF(Aggregator):
    """docs/methods/fedlf.md, following ``gfedplat/algorithm/FedLF/FedLF.py`` (commit 7b6e0b7).

    The official code queries a gradient at theta_t (``evaluate()``); our clients send model
    deltas, so g_k = -delta_k = theta_t - theta_k, as in the code's commented-out branch (which
    also divides by the local lr and multiplies it back in the server step: with
    ``server_lr = 1`` the step has the size of the FedAvg mean). Per layer group, the min-norm
    point of the hull of the rescaled client gradients, the fair gradient and the history of
    recently offline clients is a direction no row conflicts with.

    Edge cases the code leaves to NaN [OUR CHOICE]: zero rows (a client with a zero layer
    gradient, the fair gradient when all losses are equal) are left out of the QP, and a layer
    where every client gradient is zero gets d^q = 0.
    """

    class HParams(BaseHParams):
        server_lr: float = Field(1.0, gt=0.0)
        conflict_tol: float = Field(
            1e-6, ge=0.0, description="step 5: max_k(-g_k.d) allowed, g and d in gradient units"
        )

    hp: HParams

    needs = frozenset({"loss_before", "local_lr"})

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.history = ClientHistory()
        self._nonoptimal = 0

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        m, t = batch.m, batch.round
        # pseudo-gradients g_k = theta_t - theta_k: the one sign flip; float64, as norms and
        # dots of finite float32 deltas of 1e30 (an attacker's) overflow float32 (every row
        # then had a NaN norm and the QP got no row at all)
        g = -batch.deltas.double()
        h = fairness_vector(batch.stats["loss_before"]).to(g)  # step 2

        # step 3, history: clients seen within tau = floor(#seen / m) rounds, offline now
        current = set(batch.client_ids.tolist())
        hist = g.new_zeros((0, g.shape[1]))
        if len(self.history) > m:
            tau = len(self.history) // m
            hist = self.history.select(lambda c, r: t - r <= tau and c not in current, like=g)

        # step 3, per layer q: d^q = min-norm point of the rescaled rows
        self._nonoptimal = 0
        d_qp = torch.cat(
            [self._layer_direction(g[:, a:b], h, hist[:, a:b]) for a, b in batch.layout.groups]
        )

        # step 4: ||d|| = ||mean_k g_k||
        d_norm = d_qp.norm()
        d = d_qp * (g.mean(dim=0).norm() / d_norm) if d_norm > 0 else d_qp
        # step 5 (the code's float guard): halve while ||d|| > 2 ||d_QP||, else fall back to d_QP.
        # The code tests -(g.d) > 1e-6 on gradients, g = (theta_t - theta_k)/eta (its local-
        # training branch); our g and d are eta times those, so its tolerance is tol * eta^2.
        # Hand-made batches without ``local_lr`` are taken as gradients (eta = 1).
        lr = float(batch.stats["local_lr"].double().mean()) if "local_lr" in batch.stats else 1.0
        tol = self.hp.conflict_tol * lr**2
        halvings, fallback = 0, False
        while torch.max(-(g @ d)) > tol:
            if d.norm() > 2 * d_norm:
                d = d / 2
                halvings += 1
            else:
                d, fallback = d_qp, True
                break

        self.history.update(batch.client_ids, g.to(batch.deltas.dtype), t)
        cos = (g @ d) / (g.norm(dim=1) * d.norm()).clamp_min(torch.finfo(g.dtype).tiny)
        metrics = {
            "fedlf/history_rows": float(hist.shape[0]),
            "fedlf/halvings": float(halvings),
            "fedlf/fallback": float(fallback),
            "fedlf/qp_nonoptimal": float(self._nonoptimal),
            "fedlf/min_cos": float(cos.min()),
        }
        step = (-self.hp.server_lr * d).to(batch.deltas.dtype)
        return Aggregate(step, metrics)  # step 6: theta <- theta - eta d

    def _layer_direction(
        self, gq: torch.Tensor, h: torch.Tensor, hist_q: torch.Tensor
    ) -> torch.Tensor:
        """docs/methods/fedlf.md for one layer: rescale to mu_q, add fair + history rows, QP."""
        norms = gq.norm(dim=1)
        mu = norms.mean()
        if mu == 0:
            return torch.zeros_like(gq[0])
        scaled = gq * torch.where(norms > 0, mu / norms, torch.zeros_like(norms)).unsqueeze(1)
        fair = h @ scaled  # the fair gradient h . G^q (of the rescaled rows, as in the code)
        rows = _rescaled_rows([scaled, fair[None], hist_q], mu)
        r64 = rows.double()
        lam, optimal = min_norm_weights(r64 @ r64.T)
        self._nonoptimal += not optimal
        return lam.to(rows) @ rows  # d^q = lambda^T G^q

    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)
