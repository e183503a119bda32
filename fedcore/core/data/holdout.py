"""Clients held out of training for the whole run (``dataset.holdout_clients``).

The held-out set depends only on the partition (its seed and the clients' training labels), the
number of clients and the fraction, so every method run at a seed holds out the same clients.
It is stratified by class: among ``CANDIDATES`` random draws of the held-out clients, the one
that takes the smallest largest share of any class's training samples out of training, so that
every class keeps training samples among the training clients. Where no draw does, the clients
that cover every class (a greedy cover) are kept for training and the held-out clients are drawn
from the others; where even that leaves too few clients to hold out, the config is refused in
one line. The samplers never see the held-out clients (the simulation hands a sampler the
training population only); the built-in evaluation measures the global model on their local
test splits (``unseen/*``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.config import ConfigError, DatasetConfig, ExperimentConfig
from fedcore.core.data.federated import FederatedData, build_federated_data, built_key

CANDIDATES = 256  # random draws of the held-out set the stratification chooses among


def partition_seed(cfg: DatasetConfig, seed: int) -> int:
    """The seed the clients' partition was drawn from: own data's recorded one, else the run's."""
    return cfg.partition_seed if cfg.partition_seed is not None else seed


def held_out_clients(cfg: DatasetConfig, seed: int, class_counts: np.ndarray) -> np.ndarray:
    """The sorted ids of the held-out clients (empty at fraction 0).

    Args:
        cfg: the dataset block (``holdout_clients``, ``partition_seed``).
        seed: the run's seed.
        class_counts: clients x classes, each client's training samples per class.

    Raises:
        ConfigError: no held-out set of that size leaves every class a training sample.
    """
    counts = np.asarray(class_counts, dtype=np.int64)
    n = len(counts)
    count = cfg.held_out_count(n)
    if count == 0:
        return np.empty(0, dtype=np.int64)
    rng = numpy_rng(partition_seed(cfg, seed), "holdout")
    best, score = _best_draw(counts, np.arange(n), count, rng)
    if score < 1.0:
        return best
    keep = _cover(counts, rng.permutation(n))
    pool = np.setdiff1d(np.arange(n), keep)
    if len(pool) < count:
        most = (n - len(keep)) / n
        raise ConfigError(
            f"dataset.holdout_clients={cfg.holdout_clients:g} holds out {count} of {n} clients, "
            f"but at seed {seed} {len(keep)} clients are needed to keep every class in "
            f"training; allowed: at most {most:.3g} (leaving every class a training client), "
            "or 0")
    return _best_draw(counts, pool, count, rng)[0]


def _best_draw(counts: np.ndarray, pool: np.ndarray, count: int,
               rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Among ``CANDIDATES`` draws of ``count`` clients of ``pool``, the one whose largest share
    of a class's training samples is smallest (the first such), with that share."""
    totals = counts.sum(axis=0)
    present = totals > 0
    best, best_score = np.empty(0, dtype=np.int64), np.inf
    for _ in range(CANDIDATES):
        pick = np.sort(rng.permutation(pool)[:count]).astype(np.int64)
        share = counts[pick].sum(axis=0)[present] / totals[present]
        s = float(share.max()) if share.size else 0.0
        if s < best_score:
            best, best_score = pick, s
    return best, best_score


def _cover(counts: np.ndarray, order: np.ndarray) -> np.ndarray:
    """A small set of clients that together hold every present class (greedy: the client
    holding most classes not yet held, ties in ``order``)."""
    has = counts > 0
    uncovered = has.any(axis=0)
    chosen: list[int] = []
    while uncovered.any():
        gains = [int((has[k] & uncovered).sum()) for k in order]
        k = int(order[int(np.argmax(gains))])
        chosen.append(k)
        uncovered &= ~has[k]
    return np.sort(np.asarray(chosen, dtype=np.int64))


def of_data(cfg: DatasetConfig, seed: int, data: FederatedData) -> np.ndarray:
    """The held-out clients of ``data`` (stratified on its clients' clean training labels)."""
    return held_out_clients(cfg, seed, data_class_counts(data))


def check_holdouts(configs: Iterable[ExperimentConfig]) -> None:
    """Refuse, before any cell runs, a config whose held-out clients cannot leave every class
    in training (its partition built once per dataset block and seed, on the CPU)."""
    seen: set[str] = set()
    for cfg in configs:
        if cfg.dataset.holdout_clients <= 0:
            continue
        key = built_key(cfg.dataset, cfg.seed, cfg.clients)
        if key in seen:
            continue
        seen.add(key)
        data = build_federated_data(cfg.dataset, cfg.seed, torch.device("cpu"), cfg.clients)
        of_data(cfg.dataset, cfg.seed, data)


def data_class_counts(data: FederatedData) -> np.ndarray:
    """Clients x classes training samples of ``data`` (clean labels)."""
    return class_counts(data.label_mix().cpu().numpy(),
                        np.array([len(c.y_train) for c in data.clients]))


def class_counts(data_mix: np.ndarray, num_train: np.ndarray) -> np.ndarray:
    """Clients x classes training samples from each client's label mix (rows sum to 1) and its
    number of training samples."""
    counts: np.ndarray = np.rint(np.asarray(data_mix, dtype=float)
                                 * np.asarray(num_train, dtype=float)[:, None]).astype(np.int64)
    return counts


def classes_missing(counts: np.ndarray, held_out: np.ndarray) -> int:
    """Classes with training samples on some client but on no training client."""
    counts = np.asarray(counts)
    training = np.setdiff1d(np.arange(len(counts)), held_out)
    return int(((counts.sum(axis=0) > 0) & (counts[training].sum(axis=0) == 0)).sum())


def training_clients(num_clients: int, held_out: np.ndarray) -> np.ndarray:
    """The ids a sampler may draw from: every client not held out, sorted."""
    return np.setdiff1d(np.arange(num_clients, dtype=np.int64), held_out)
