"""Every global random generator's state, saved and restored."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from fedcore.core.component.seeding import GLOBAL_RNG_LOCK


def rng_state() -> dict[str, Any]:
    """Every global generator: torch CPU and CUDA, numpy's legacy global, Python's ``random``."""
    with GLOBAL_RNG_LOCK:
        state = np.random.get_state(legacy=True)
        assert isinstance(state, tuple)  # the legacy form: (kind, keys, pos, has_gauss, gauss)
        kind, keys, pos, has_gauss, gauss = state
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
            "python": random.getstate(),
        }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore ``rng_state`` (CUDA only onto as many devices as were saved)."""
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    version, internal, gauss_next = state["python"]
    with GLOBAL_RNG_LOCK:
        torch.set_rng_state(state["torch"].cpu())
        cuda = state["cuda"]
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
        np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
        random.setstate((version, tuple(internal), gauss_next))
