"""Round metrics: accuracy, per-client fairness, update conflict."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


@torch.no_grad()
def per_sample_eval(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 2048
) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, loss) for each sample, in eval mode."""
    model.eval()
    correct, losses = [], []
    for start in range(0, len(y), batch_size):
        logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        correct.append(logits.argmax(1) == target)
        losses.append(nn.functional.cross_entropy(logits, target, reduction="none"))
    if not correct:
        return torch.zeros(0, dtype=torch.bool), torch.zeros(0)
    return torch.cat(correct), torch.cat(losses)


def decile_mean(values: np.ndarray, worst: bool) -> float:
    """Mean of the lowest (``worst``) or highest 10 % of values, at least one value."""
    if len(values) == 0:
        return math.nan
    k = max(1, math.ceil(0.1 * len(values)))
    ordered = np.sort(values)
    return float(ordered[:k].mean() if worst else ordered[-k:].mean())


def jain_index(values: np.ndarray) -> float:
    """(sum x)^2 / (n sum x^2); 1 when all equal."""
    sq = float(np.sum(values**2))
    return float(np.sum(values) ** 2 / (len(values) * sq)) if sq > 0 else 1.0


def fairness_summary(acc: np.ndarray, prefix: str = "clients") -> dict[str, float]:
    return {
        f"{prefix}/accuracy_mean": float(acc.mean()),
        f"{prefix}/accuracy_std": float(acc.std()),
        f"{prefix}/accuracy_worst10": decile_mean(acc, worst=True),
        f"{prefix}/accuracy_best10": decile_mean(acc, worst=False),
        f"{prefix}/jain_index": jain_index(acc),
    }


def conflict_fraction(deltas: torch.Tensor, step: torch.Tensor) -> float:
    """Share of clients whose delta has a negative dot product with the server step."""
    return float((deltas @ step < 0).float().mean())
