"""Clients held out of training for the whole run (``dataset.holdout_clients``).

The held-out set depends only on the partition's seed, the number of clients and the fraction,
so every method run at a seed holds out the same clients. The samplers never see them (the
simulation hands a sampler the training population only); the built-in evaluation measures the
global model on their local test splits (``unseen/*``).
"""

from __future__ import annotations

import numpy as np

from fedcore.core.config import DatasetConfig
from fedcore.core.config.seeding import numpy_rng


def partition_seed(cfg: DatasetConfig, seed: int) -> int:
    """The seed the clients' partition was drawn from: own data's recorded one, else the run's."""
    return cfg.partition_seed if cfg.partition_seed is not None else seed


def held_out_clients(cfg: DatasetConfig, seed: int, num_clients: int) -> np.ndarray:
    """The sorted ids of the held-out clients among ``num_clients`` (empty at fraction 0)."""
    count = cfg.held_out_count(num_clients)
    if count == 0:
        return np.empty(0, dtype=np.int64)
    rng = numpy_rng(partition_seed(cfg, seed), "holdout")
    return np.sort(rng.permutation(num_clients)[:count]).astype(np.int64)


def training_clients(num_clients: int, held_out: np.ndarray) -> np.ndarray:
    """The ids a sampler may draw from: every client not held out, sorted."""
    return np.setdiff1d(np.arange(num_clients, dtype=np.int64), held_out)
