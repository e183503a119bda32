"""Clients that misbehave: noisy labels (FedOUI's scenario C) and Byzantine updates."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedcore.core.component.seeding import numpy_rng


def choose_clients(num_clients: int, fraction: float, seed: int, purpose: str) -> np.ndarray:
    """A seeded set of floor(fraction * N) client ids."""
    count = math.floor(fraction * num_clients + 1e-9)
    return np.sort(numpy_rng(seed, purpose).choice(num_clients, count, replace=False))


def flip_labels(
    labels: torch.Tensor, rate: float, num_classes: int, rng: np.random.Generator
) -> torch.Tensor:
    """Flip a ``rate`` share of labels to a uniformly drawn *different* class."""
    y = labels.clone()
    n_flip = int(round(rate * len(y)))
    if n_flip == 0 or num_classes < 2:
        return y
    idx = rng.choice(len(y), n_flip, replace=False)
    shift = rng.integers(1, num_classes, n_flip)
    flipped = (y[idx].cpu().numpy() + shift) % num_classes
    y[torch.as_tensor(idx, device=y.device)] = torch.as_tensor(flipped, device=y.device)
    return y


def attack_update(
    delta: torch.Tensor, attack: str, strength: float, generator: torch.Generator
) -> torch.Tensor:
    """What a Byzantine client sends instead of its honest delta."""
    if attack == "sign_flip":
        return -strength * delta
    if attack == "scale":
        return strength * delta
    if attack == "gaussian":
        noise = torch.randn(delta.shape, generator=generator, dtype=delta.dtype)
        return strength * noise.to(delta.device)
    raise ValueError(f"clients.attack: unknown {attack!r}; allowed: sign_flip, scale, gaussian")
