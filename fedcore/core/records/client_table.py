"""The per-client table of an evaluated round (a leaf record: the evaluation callback fills it,
the run's result and the trackers read it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ClientTable:
    """Per-client evaluation of one round: the global model on each client's local test split."""

    round: int
    client_id: np.ndarray
    accuracy: np.ndarray
    loss: np.ndarray
    num_samples: np.ndarray
    sampled: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)
