"""Cosine-alignment weighting, the FedOUI repository's "FedAlign", docs/methods/fedalign.md.

Not Mendieta et al.'s FedAlign (CVPR 2022), hence the rule name ``cos_align``. Each client is
weighted by how well its delta aligns with the FedAvg direction r = sum_k p_k delta_k:
w_k ∝ max(n_k, 1)^rho (max(0, cos(delta_k, r)) + eps)^eta, renormalised (uniform if all zero).
"""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

TINY = 1e-12  # below this a sum of weights counts as zero (the reference code's guard)


def alignment_weights(
    deltas: torch.Tensor, num_samples: torch.Tensor, eps: float, eta: float, rho: float,
    zero_tol: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, cos) in float64 for m x d ``deltas``; see the module docstring.

    ``zero_tol``: treat r as 0 when ||r|| <= zero_tol * max_k ||delta_k|| (off by default).
    """
    d = deltas.double()
    n = num_samples.double().to(d.device)
    m = d.shape[0]
    p = n / n.sum() if float(n.sum()) > TINY else torch.full_like(n, 1.0 / m)
    r = p @ d
    norms, r_norm = d.norm(dim=1), r.norm()
    if zero_tol is not None and float(r_norm) <= zero_tol * float(norms.max()):
        r, r_norm = torch.zeros_like(r), r.new_zeros(())
    denom = norms * r_norm
    cos = torch.where(denom != 0, (d @ r) / torch.where(denom != 0, denom, 1.0), 0.0)
    cos = cos.clamp(-1.0, 1.0)
    omega = n.clamp_min(1.0).pow(rho) * (cos.clamp_min(0.0) + eps).pow(eta)
    total = omega.sum()
    w = omega / total if float(total) > TINY else torch.full_like(omega, 1.0 / m)
    return w, cos


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "client": {"alignment_cos": "cosine of the client's update with the server step direction"},
    "round": {
        "cos_align/cos_mean": "mean cosine between client updates and their mean",
        "cos_align/negative_fraction": "share of clients with a negative cosine",
        "cos_align/weight_max": "largest client weight",
    },
}


@register("cos_align")
class CosAlign(Aggregator):
    class HParams(BaseHParams):
        epsilon: float = Field(1e-3, gt=0.0)  # > 0: eps = 0 with r = 0 leaves FedAvg's weights
        eta: float = Field(1.0, ge=0.0)  # sharpness; 0 gives FedAvg's weights
        rho: float = Field(1.0, ge=0.0)  # size exponent
        server_lr: float = Field(1.0, gt=0.0)
        zero_tol: float | None = Field(None, ge=0.0)

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        hp = self.hp
        w, cos = alignment_weights(
            batch.deltas, batch.num_samples, hp.epsilon, hp.eta, hp.rho, hp.zero_tol
        )
        step = hp.server_lr * (w.to(batch.deltas) @ batch.deltas)
        metrics = {
            "cos_align/cos_mean": float(cos.mean()),
            "cos_align/negative_fraction": float((cos < 0).double().mean()),
            "cos_align/weight_max": float(w.max()),
        }
        return Aggregate(step, metrics, client_values={"alignment_cos": cos})
