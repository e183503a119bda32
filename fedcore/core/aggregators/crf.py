"""CRF aggregation: energy-based structured inference over client reliability labels.

Fenoglio, Kirilenko, Gjoreski, Langheinrich, "Federated Learning with Energy-Based Structured
Probabilistic Inference", SPIGM @ ICML 2026 (arXiv 2606.30161). No code was published; this is
the fully specified instantiation of docs/methods/crf.md, every [OUR CHOICE] a hyper-parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field, field_validator

from fedcore.core.aggregators.base import Aggregator, register
from fedcore.core.aggregators.coordinate import coordinate_median
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

EPS = 1e-12


@dataclass
class CRFResult:
    """Every intermediate of one CRF round (rows follow the batch)."""

    reference: torch.Tensor  # r (d)
    cosine: torch.Tensor  # c_k
    distance: torch.Tensor  # delta_k
    z_distance: torch.Tensor  # z^delta_k
    norm_anomaly: torch.Tensor  # a_k
    score: torch.Tensor  # s_k
    unary: torch.Tensor  # psi_k(lambda), m x |L|
    affinity: torch.Tensor  # A, m x m
    q: torch.Tensor  # Q_k(lambda), m x |L|
    expected_reliability: torch.Tensor  # r_bar_k
    weights: torch.Tensor  # w_k
    fallback: bool
    iterations_run: int


def robust_z(v: torch.Tensor) -> torch.Tensor:
    """(v - med v) / (1.4826 MAD + eps), clipped to [-3, 3]; identically 0 when MAD = 0."""
    med = coordinate_median(v)
    mad = coordinate_median((v - med).abs())
    z = ((v - med) / (1.4826 * mad + EPS)).clamp(-3.0, 3.0)
    return torch.where(mad == 0, torch.zeros_like(z), z)


def pairwise_messages(
    q: torch.Tensor, affinity: torch.Tensor, labels: torch.Tensor, coef: float, pairwise: str
) -> torch.Tensor:
    """M_k(lambda) = sum_{j != k} E_{Q_j} psi_kj(lambda, y_j), for all k and lambda at once."""
    a_sum = affinity.sum(dim=1, keepdim=True)  # A_kk = 0, so this is the sum over j != k
    if pairwise == "potts":  # psi_kj = coef A_kj 1[lambda != lambda']  ->  A_kj (1 - Q_j(lambda))
        return coef * (a_sum - affinity @ q)
    mu = q @ labels  # mu_j = sum_lambda lambda Q_j(lambda)
    nu = q @ labels**2  # nu_j = sum_lambda lambda^2 Q_j(lambda)
    return coef * (
        a_sum * labels**2 - 2.0 * (affinity @ mu)[:, None] * labels + (affinity @ nu)[:, None]
    )


def crf_inference(deltas: torch.Tensor, num_samples: torch.Tensor, hp: CRF.HParams) -> CRFResult:
    """docs/methods/crf.md on an m x d matrix of deltas, computed in float64: norms and Gram
    entries of finite float32 deltas as large as an attacker's 1e30 overflow float32 (inf/inf
    = NaN weights) but not float64. The results are returned in the deltas' dtype."""
    m, dtype = deltas.shape[0], deltas.dtype
    deltas = deltas.double()
    labels = torch.tensor(hp.labels, dtype=deltas.dtype, device=deltas.device)
    n = num_samples.to(deltas)

    # step 1: coordinate-wise median reference (np.median semantics for even m)
    r = coordinate_median(deltas, dim=0)

    # step 2: statistics per client, then robust normalisation across clients
    norms = torch.linalg.vector_norm(deltas, dim=1)
    r_norm = torch.linalg.vector_norm(r)
    cos_ref = (deltas @ r) / (norms * r_norm + EPS)
    med_norm = coordinate_median(norms)
    denom = torch.where(r_norm < 1e-8 * med_norm, med_norm, r_norm) + EPS  # r = 0 fallback
    dist = torch.linalg.vector_norm(deltas - r, dim=1) / denom
    log_norm = torch.log(norms + EPS)
    z_dist = robust_z(dist)
    anomaly = robust_z(log_norm).abs()

    # step 3: reliability score
    s = torch.sigmoid(hp.w_c * cos_ref - hp.w_d * z_dist.clamp(min=0) - hp.w_a * anomaly + hp.b)

    # step 4: unary energy psi_k(lambda) = beta_u (lambda - s_k)^2
    unary = hp.unary_sharpness * (labels[None, :] - s[:, None]) ** 2

    # step 5: affinity A_kj = [cos(Delta_k, Delta_j)]_+ min(s_k, s_j), A_kk = 0 (Gram matrix)
    gram = deltas @ deltas.T
    cos = gram / (norms[:, None] * norms[None, :] + EPS)
    affinity = cos.clamp(min=0) * torch.minimum(s[:, None], s[None, :])
    affinity.fill_diagonal_(0.0)
    # lambda_p / (m - 1), as the method's spec states (crf.md: "normalised by (m - 1), so it is
    # independent of m"); not a weakening: the message sums m - 1 neighbours
    coef = hp.pairwise_weight / max(m - 1, 1)

    # step 6: damped parallel mean field
    q = torch.softmax(-unary, dim=1)
    iterations_run = 0
    for _ in range(hp.iterations):
        messages = pairwise_messages(q, affinity, labels, coef, hp.pairwise)
        q_tilde = torch.softmax(-unary - messages, dim=1)  # softmax subtracts the max
        q_new = (1.0 - hp.damping) * q + hp.damping * q_tilde
        change = (q_new - q).abs().max()
        q = q_new
        iterations_run += 1
        if change < hp.tol:
            break

    # step 7: expected reliability; step 8: weights, FedAvg fallback when all vanish
    r_bar = q @ labels
    total = (n * r_bar).sum()
    fallback = bool(total < 1e-12)
    weights = n / n.sum() if fallback else n * r_bar / total
    return CRFResult(
        reference=r.to(dtype),
        cosine=cos_ref.to(dtype),
        distance=dist.to(dtype),
        z_distance=z_dist.to(dtype),
        norm_anomaly=anomaly.to(dtype),
        score=s.to(dtype),
        unary=unary.to(dtype),
        affinity=affinity.to(dtype),
        q=q.to(dtype),
        expected_reliability=r_bar.to(dtype),
        weights=weights.to(dtype),
        fallback=fallback,
        iterations_run=iterations_run,
    )


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "client": {"expected_reliability": "the CRF's expected reliability of the client's update"},
    "round": {
        "crf/expected_reliability_mean": (
            "mean over clients of the CRF's expected reliability label"
        ),
        "crf/expected_reliability_min": "smallest expected reliability",
        "crf/fallback": "1 when every weight vanished and FedAvg weights were used",
        "crf/iterations_run": "mean-field iterations until convergence",
    },
}


@register("crf")
class CRF(Aggregator):
    """Weights w_k proportional to n_k E_Q[y_k], Q the mean-field posterior of a fully connected
    CRF over reliability labels (docs/methods/crf.md). Memoryless across rounds."""

    class HParams(BaseHParams):
        labels: list[float] = Field(default_factory=lambda: [0.0, 0.25, 1.0])
        w_c: float = Field(2.0, ge=0.0, description="weight of the cosine agreement")
        w_d: float = Field(1.0, ge=0.0, description="weight of the distance anomaly")
        w_a: float = Field(1.0, ge=0.0, description="weight of the norm anomaly")
        b: float = 0.0
        unary_sharpness: float = Field(10.0, gt=0.0, description="beta_u")
        pairwise_weight: float = Field(5.0, ge=0.0, description="lambda_p")
        iterations: int = Field(10, ge=0, description="I, mean-field iterations")
        damping: float = Field(0.5, gt=0.0, le=1.0, description="gamma")
        tol: float = Field(1e-4, ge=0.0)
        server_lr: float = Field(1.0, gt=0.0)
        pairwise: Literal["quadratic", "potts"] = "quadratic"

        @field_validator("labels")
        @classmethod
        def _check_labels(cls, v: list[float]) -> list[float]:
            if not v:
                raise ValueError("labels must be non-empty")
            if any(not 0.0 <= x <= 1.0 for x in v):
                raise ValueError(f"labels must lie in [0, 1], got {v}")
            if any(a >= b for a, b in zip(v, v[1:], strict=False)):
                raise ValueError(f"labels must be strictly ascending, got {v}")
            if max(v) <= 0.0:
                raise ValueError("at least one label must be > 0")
            return v

    hp: HParams

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        res = crf_inference(batch.deltas, batch.num_samples, self.hp)
        r_bar = res.expected_reliability
        metrics = {
            "crf/expected_reliability_mean": float(r_bar.mean()),
            "crf/expected_reliability_min": float(r_bar.min()),
            "crf/fallback": float(res.fallback),
            "crf/iterations_run": float(res.iterations_run),
        }
        # step 9: theta_{t+1} = theta_t + eta_s sum_k w_k Delta_k   (docs/methods/crf.md)
        step = (res.weights.double() @ batch.deltas.double()).to(batch.deltas.dtype)
        return Aggregate(
            self.hp.server_lr * step,
            metrics,
            client_values={"expected_reliability": r_bar.detach()},
        )
