"""Per-round local learning rate: constant (with optional geometric decay) or warm-up + cosine."""

from __future__ import annotations

import math

from fedcore.core.config import LocalConfig


def local_lr(local: LocalConfig, round: int, rounds: int) -> float:
    """eta_r of round ``round`` (1..rounds); warmup_cosine: docs/methods/fedavg.md."""
    if local.lr_schedule == "constant":
        # CRAFT's fed/client.py resolve_round_lr: lr * decay^max(t - 1, 0) with t = 0, 1, ...;
        # our round r is its t = r - 1, so rounds 1 and 2 both train at lr
        return local.lr * local.lr_decay ** max(round - 2, 0)
    eta_max, eta_min, warm = local.lr, local.lr_min, local.warmup_rounds
    if round <= warm:
        return eta_max * round / warm
    if rounds <= warm:
        return eta_max
    progress = (round - warm) / (rounds - warm)
    return eta_min + 0.5 * (eta_max - eta_min) * (1.0 + math.cos(math.pi * progress))
