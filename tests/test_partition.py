import numpy as np
import pytest

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.config import DatasetConfig
from fedcore.core.data.federated import partition_indices
from fedcore.core.data.partition import (
    dirichlet_partition,
    iid_partition,
    shard_partition,
    split_local,
)

LABELS = np.repeat(np.arange(10), 100)


def _covers_once(parts, n):
    allidx = np.concatenate(parts)
    return len(allidx) == n and len(np.unique(allidx)) == n


def _mean_classes(parts, labels):
    return np.mean([len(np.unique(labels[p])) for p in parts])


def test_iid_sizes_and_cover():
    parts = iid_partition(1000, 7, numpy_rng(0, "p"))
    assert _covers_once(parts, 1000)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("alpha", [0.05, 0.5, 10.0])
def test_dirichlet_covers_every_sample_once(alpha):
    parts = dirichlet_partition(LABELS, 20, alpha, numpy_rng(1, "p"), min_samples=5)
    assert _covers_once(parts, len(LABELS))
    assert min(map(len, parts)) >= 5


def test_label_skew_grows_as_alpha_shrinks():
    skew = [_mean_classes(dirichlet_partition(LABELS, 20, a, numpy_rng(3, "p")), LABELS)
            for a in (100.0, 1.0, 0.05)]
    assert skew[0] > skew[1] > skew[2]
    assert skew[0] > 9.5 and skew[2] < 4


def test_min_samples_terminates_at_tiny_alpha_and_many_clients():
    labels = np.repeat(np.arange(10), 30)
    parts = dirichlet_partition(labels, 100, 0.001, numpy_rng(0, "p"), min_samples=3, max_tries=5)
    assert _covers_once(parts, 300)
    assert min(map(len, parts)) >= 3


def test_min_samples_impossible_is_a_clear_error():
    with pytest.raises(ValueError, match="min_samples"):
        dirichlet_partition(LABELS, 200, 0.1, numpy_rng(0, "p"), min_samples=6)


def test_shards_give_at_most_k_classes():
    parts = shard_partition(LABELS, 20, 2, numpy_rng(0, "p"))
    assert _covers_once(parts, len(LABELS))
    assert max(len(np.unique(LABELS[p])) for p in parts) <= 2


def test_partition_is_deterministic_in_seed():
    cfg = DatasetConfig(num_clients=10, alpha=0.3)
    a = partition_indices(LABELS, cfg, seed=5)
    b = partition_indices(LABELS, cfg, seed=5)
    c = partition_indices(LABELS, cfg, seed=6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_partition_matches_recorded_fingerprint():
    """The same seed gives the same partition on any machine (numpy's PCG64 + SeedSequence)."""
    parts = dirichlet_partition(LABELS, 5, 0.5, numpy_rng(0, "partition"), min_samples=10)
    assert [len(p) for p in parts] == FINGERPRINT


def test_split_local_fraction_and_disjoint():
    train, test = split_local(np.arange(50), 0.2, numpy_rng(0, "s"))
    assert len(test) == 10 and len(train) == 40
    assert not set(train) & set(test)
    train, test = split_local(np.arange(3), 0.01, numpy_rng(0, "s"))
    assert len(test) == 1 and len(train) == 2


FINGERPRINT = [228, 325, 194, 153, 100]
