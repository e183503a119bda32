"""FedOUI's pure functions: the OUI of a probe batch, the Beta fit and the client scores.

docs/methods/fedoui.md (OUI; fit, scores, weights; edge cases). The O(m) fit
runs in float64 NumPy/SciPy on the CPU, as in the official code (AlbertoFdezHdez/FedOUI@972afe2).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

# The client's probe batch (docs/methods/fedoui.md): a fixed size; the seed is the experiment
# seed (the client hook passes ``LocalContext.seed``), as the official runner derives it.
PROBE_SIZE = 32
PROBE_SEED = 0  # default of ``probe_indices`` outside a run
PROBE_CLIENT_STRIDE = 10007
CDF_CLIP = 1e-4  # hard-coded clip before the Beta CDF (docs/methods/fedoui.md), distinct from eps


def probe_indices(
    num_train: int, client_id: int, size: int = PROBE_SIZE, seed: int = PROBE_SEED
) -> torch.Tensor:
    """Indices (CPU, int64) of client ``client_id``'s fixed probe batch in its train split.

    Drawn with a generator seeded ``seed + 10007 * client_id``: without replacement when
    ``num_train >= size``, with replacement otherwise; empty for a client without data.
    """
    gen = torch.Generator().manual_seed(seed + PROBE_CLIENT_STRIDE * client_id)
    if num_train <= 0:
        return torch.zeros(0, dtype=torch.long)
    if num_train >= size:
        return torch.randperm(num_train, generator=gen)[:size]
    return torch.randint(0, num_train, (size,), generator=gen)


def oui_from_preactivations(h: torch.Tensor) -> float:
    """OUI of a B x d pre-activation matrix: mean_j min(s_j, B - s_j) / max(B//2, 1) (fedoui.md).

    1 = every unit active on exactly half of the probe; 0 = every unit has a constant sign;
    0 when B < 2. Inputs with more than two dimensions are flattened per sample.
    """
    if h.dim() != 2:
        h = h.flatten(start_dim=1)
    b = int(h.shape[0])
    if b < 2 or h.shape[1] == 0:
        return 0.0
    active = (h > 0).sum(dim=0)  # s_j
    minority = torch.minimum(active, b - active)  # u_j
    return float(np.clip(minority.double().mean().item() / max(b // 2, 1), 0.0, 1.0))


@dataclass(frozen=True)
class BetaFit:
    alpha: float
    beta: float
    method: str  # "moments" or "mle"


def fit_beta(values: np.ndarray, eps: float, var_floor: float = 0.0) -> BetaFit | None:
    """Beta fit of ``clip(values, eps, 1 - eps)``: moments, else MLE, else None (fedoui.md).

    ``var_floor`` > 0 is our stability option s^2 <- max(s^2, var_floor) (docs/methods/fedoui.md).
    """
    v = np.clip(np.asarray(values, dtype=np.float64), eps, 1.0 - eps)
    if v.size < 2:
        return None
    mean, var = float(v.mean()), max(float(v.var(ddof=1)), var_floor)
    if np.isfinite(mean) and np.isfinite(var) and var > 0:
        common = mean * (1.0 - mean) / var - 1.0
        if np.isfinite(common) and common > 0:
            return BetaFit(max(mean * common, 1e-6), max((1.0 - mean) * common, 1e-6), "moments")
    from scipy import stats  # imported here: only the MLE fallback needs it

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alpha, beta, _, _ = stats.beta.fit(v, floc=0.0, fscale=1.0)
    except Exception:  # scipy raises FitSolverError (and others) on degenerate samples
        return None
    if not (np.isfinite(alpha) and np.isfinite(beta) and alpha > 0 and beta > 0):
        return None
    return BetaFit(float(alpha), float(beta), "mle")


def beta_scores(ouis: np.ndarray, fit: BetaFit) -> np.ndarray:
    """Two-sided typicality s_k = 2 min(F_k, 1 - F_k), F_k = BetaCDF(clip(o_k, 1e-4)) (step 7a)."""
    o = np.clip(np.asarray(ouis, dtype=np.float64), CDF_CLIP, 1.0 - CDF_CLIP)
    from scipy import stats

    cdf = stats.beta.cdf(o, fit.alpha, fit.beta)
    scores: np.ndarray = 2.0 * np.minimum(cdf, 1.0 - cdf)
    return scores


def percentile_scores(ouis: np.ndarray) -> np.ndarray:
    """Empirical fallback (step 7b): P_k = average rank / (m + 1), s_k = 2 min(P_k, 1 - P_k)."""
    o = np.asarray(ouis, dtype=np.float64)
    from scipy import stats

    p = stats.rankdata(o, method="average") / (o.size + 1.0)
    scores: np.ndarray = 2.0 * np.minimum(p, 1.0 - p)
    return scores


def oui_scores(
    ouis: np.ndarray, window: np.ndarray | None = None, eps: float = 1e-3, var_floor: float = 0.0
) -> tuple[np.ndarray, BetaFit | None]:
    """Scores of this round's OUIs (docs/methods/fedoui.md); the Beta is fitted to ``window``.

    ``window`` defaults to ``ouis`` (window "current"); for "last5" it holds the previous
    rounds' OUIs followed by this round's. Returns (scores, fit), fit None on the fallback.
    All-equal fit values give s = 1 for everyone (docs/methods/fedoui.md, checked explicitly).
    """
    o = np.asarray(ouis, dtype=np.float64)
    v = o if window is None else np.asarray(window, dtype=np.float64)
    if v.size == 0 or float(v.max() - v.min()) < 1e-12:
        return np.ones_like(o), None
    fit = fit_beta(v, eps, var_floor)
    if fit is not None:
        scores = beta_scores(o, fit)
        if np.all(np.isfinite(scores)):
            return scores, fit
    return percentile_scores(o), None


def fedoui_weights(
    num_samples: np.ndarray,
    scores: np.ndarray,
    rho: float = 1.0,
    gamma: float = 1.0,
    eps: float = 1e-3,
) -> np.ndarray:
    """w_k ∝ max(n_k, 1)^rho (eps + s_k)^gamma, normalised; uniform if the sum is ~0 (step 8)."""
    n = np.maximum(np.asarray(num_samples, dtype=np.float64), 1.0)
    w = np.maximum(
        n**rho * (np.maximum(np.asarray(scores, dtype=np.float64), 0.0) + eps) ** gamma, 0.0
    )
    total = float(w.sum())
    if not np.isfinite(total) or total <= 1e-12:
        return np.full(w.shape, 1.0 / max(w.size, 1))
    return w / total
