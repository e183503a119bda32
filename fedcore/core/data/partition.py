"""Partitioners: split sample indices among clients (pure functions of labels or owner ids and a
Generator)."""

from __future__ import annotations

import numpy as np

from fedcore.core.config import (
    ConfigError,  # a ValueError: the config asks for more than the data has
)


def iid_partition(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and cut into ``num_clients`` near-equal parts.

    Args:
        num_samples: how many samples there are.
        num_clients: how many parts.
        rng: the generator that shuffles.

    Returns:
        Each client's sorted sample indices.
    """
    if num_clients > num_samples:
        raise ConfigError(
            f"dataset.num_clients={num_clients} exceeds the {num_samples} samples available; "
            f"allowed: 1..{num_samples}"
        )
    return [np.sort(p) for p in np.array_split(rng.permutation(num_samples), num_clients)]


def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_samples: int = 0,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Label skew: for each class c, a draw of Dir(alpha 1_N) splits class c's indices.

    Resamples up to ``max_tries`` times until every client has ``min_samples``; if that never
    happens (tiny alpha, many clients), moves samples from the largest clients to the smallest,
    so the function always terminates.

    Args:
        labels: every sample's integer label.
        num_clients: how many clients.
        alpha: the Dirichlet concentration (small: each client holds few classes).
        rng: the generator of the draws.
        min_samples: the fewest samples a client may hold.
        max_tries: draws before samples are moved instead.

    Returns:
        Each client's sample indices.
    """
    labels = np.asarray(labels)
    if num_clients * min_samples > len(labels):
        raise ConfigError(
            f"dataset.min_samples={min_samples} x dataset.num_clients={num_clients} "
            f"exceeds the {len(labels)} samples available"
        )
    classes = np.unique(labels)
    parts: list[list[np.ndarray]] = []
    for _ in range(max_tries):
        parts = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
        sizes = [sum(len(c) for c in p) for p in parts]
        if min(sizes) >= min_samples:
            break
    clients = [np.concatenate(p) if p else np.empty(0, dtype=np.int64) for p in parts]
    return [np.sort(c) for c in _top_up(clients, min_samples, rng)]


def _top_up(
    clients: list[np.ndarray], min_samples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Move random samples from the largest clients until each has ``min_samples``."""
    clients = [rng.permutation(c) for c in clients]
    while True:
        sizes = np.array([len(c) for c in clients])
        poor = int(np.argmin(sizes))
        need = min_samples - sizes[poor]
        if need <= 0:
            return clients
        rich = int(np.argmax(sizes))
        take = min(need, sizes[rich] - min_samples)
        clients[poor] = np.concatenate([clients[poor], clients[rich][:take]])
        clients[rich] = clients[rich][take:]


def shard_partition(
    labels: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Sort by label, cut into N*k shards, deal k random shards to each client (McMahan 2017).

    Args:
        labels: every sample's integer label.
        num_clients: N, how many clients.
        shards_per_client: k, the shards each client gets.
        rng: the generator that deals the shards.

    Returns:
        Each client's sample indices.
    """
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    num_shards = num_clients * shards_per_client
    if num_shards > len(labels):
        raise ConfigError(
            f"dataset.num_clients x dataset.shards_per_client = {num_shards} shards "
            f"exceeds the {len(labels)} samples available"
        )
    shards = np.array_split(order, num_shards)
    deal = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in deal]


def split_local(
    indices: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split one client's indices into local train and local test parts."""
    perm = rng.permutation(indices)
    n_test = int(round(test_fraction * len(perm)))
    if test_fraction > 0 and len(perm) >= 2:
        n_test = min(max(n_test, 1), len(perm) - 1)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def group_by_owner(owners: np.ndarray) -> dict[int, np.ndarray]:
    """owner id -> its sample indices (ascending), owners in ascending id order."""
    owners = np.asarray(owners)
    order = np.argsort(owners, kind="stable")
    ids, starts = np.unique(owners[order], return_index=True)
    return {int(o): idx for o, idx in zip(ids, np.split(order, starts[1:]), strict=True)}


def natural_partition(
    owners: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    eligible: np.ndarray | None = None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """One client per owner (e.g. FEMNIST writer): ``num_clients`` owners drawn without
    replacement from ``eligible`` (default: every owner present), in ascending id order, and
    each one's sample indices. Returns (chosen owner ids, index sets)."""
    groups = group_by_owner(owners)
    pool = np.array(sorted(groups), dtype=np.int64) if eligible is None else np.asarray(eligible)
    pool = np.intersect1d(pool, np.fromiter(groups, dtype=np.int64, count=len(groups)))
    if num_clients > len(pool):
        raise ConfigError(
            f"dataset.num_clients={num_clients} exceeds the {len(pool)} owners (writers) "
            f"available for the natural partition; allowed: 1..{len(pool)}"
        )
    chosen = np.sort(rng.choice(pool, num_clients, replace=False))
    return chosen, [groups[int(o)] for o in chosen]
