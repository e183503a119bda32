"""FederatedData: a dataset split among clients, each with local train and test tensors."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.config import HUB_PREFIX, ClientsConfig, ConfigError, DatasetConfig
from fedcore.core.data.adversaries import choose_clients, flip_labels
from fedcore.core.data.client_data import ClientData, label_mix
from fedcore.core.data.datasets import DatasetArrays, load_dataset
from fedcore.core.data.partition import (
    dirichlet_partition,
    group_by_owner,
    iid_partition,
    natural_partition,
    shard_partition,
    split_local,
)


@dataclass
class FederatedData:
    clients: list[ClientData]
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    in_shape: tuple[int, ...]  # one sample's shape: (C, H, W) for the built-in datasets
    noisy_clients: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    # per client: (indices of its train samples, indices of its local test samples) in the
    # dataset's train split (natural FEMNIST clients: local test indices into the test split)
    partition: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    # clients x classes: each client's training label distribution before any label noise
    clean_label_mix: torch.Tensor | None = None
    # own data (fedcore.core.data.own.federate): its name, source, partition settings and digest
    record: DatasetConfig | None = None
    # data fedcore built from a config: ``built_key`` of that config (None: built elsewhere)
    built_from: str | None = None
    # the validation set held out of the global test split (``dataset.val_fraction``; None: none)
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def label_mix(self) -> torch.Tensor:
        """Clients x classes: each client's training label distribution (rows sum to 1), of its
        clean labels (a noisy client's flipped labels are not its data's); data built by hand
        without it: of the clients' ``y_train``."""
        if self.clean_label_mix is not None:
            return self.clean_label_mix
        return label_mix([c.y_train for c in self.clients], self.num_classes)


def built_key(cfg: DatasetConfig, seed: int, behaviour: ClientsConfig | None) -> str:
    """What ``build_federated_data`` was called with (not the device)."""
    return json.dumps([cfg.model_dump(mode="json"), seed,
                       behaviour.model_dump(mode="json") if behaviour is not None else None],
                      sort_keys=True)


def partition_digest(data: FederatedData) -> str:
    """A short hash of which samples each client holds (same partition, same digest).

    Hashes the partition indices; data built without them (hand-made in tests) hashes each
    client's labels instead.
    """
    h = hashlib.sha256()
    if data.partition:
        for k, (train, test) in enumerate(data.partition):
            h.update(f"client {k} {len(train)} {len(test)}|".encode())
            h.update(np.asarray(train, dtype=np.int64).tobytes())
            h.update(np.asarray(test, dtype=np.int64).tobytes())
    else:
        for c in data.clients:
            h.update(f"client {c.client_id}|".encode())
            h.update(c.y_train.cpu().numpy().astype(np.int64).tobytes())
            h.update(c.y_test.cpu().numpy().astype(np.int64).tobytes())
    return h.hexdigest()[:16]


def partition_indices(
    labels: np.ndarray, cfg: DatasetConfig, seed: int, owners: np.ndarray | None = None
) -> list[np.ndarray]:
    """Client index sets for the configured partitioner, deterministic in ``seed``.

    ``natural`` gives one client per owner id in ``owners`` (one per train sample).
    """
    rng = numpy_rng(seed, "partition")
    if cfg.partition == "natural":
        if owners is None:
            raise ConfigError(_no_owners(cfg.name))
        return _natural(owners, cfg, rng)[1]
    if cfg.partition == "iid":
        return iid_partition(len(labels), cfg.num_clients, rng)
    if cfg.partition == "dirichlet":
        return dirichlet_partition(labels, cfg.num_clients, cfg.alpha, rng, cfg.min_samples)
    return shard_partition(labels, cfg.num_clients, cfg.shards_per_client, rng)


def natural_split(
    arrays: DatasetArrays, cfg: DatasetConfig, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``natural`` partition of a dataset whose train and test samples both have owner ids: each
    chosen owner's train samples (indices into ``x_train``) and test samples (into ``x_test``)."""
    if arrays.owner_train is None or arrays.owner_test is None:
        raise ConfigError(_no_owners(cfg.name))
    owners_te = arrays.owner_test.numpy()
    both = np.intersect1d(arrays.owner_train.numpy(), owners_te)
    if len(both) == 0:
        raise ConfigError(
            f"dataset.partition: 'natural' needs owners with both train and test samples and "
            f"{cfg.name} has none (for FEMNIST use LEAF's '-t sample' split, not '-t user')"
        )
    chosen, train = _natural(arrays.owner_train.numpy(), cfg, numpy_rng(seed, "partition"), both)
    tests = group_by_owner(owners_te)
    return train, [tests[int(o)] for o in chosen]


def _natural(
    owners: np.ndarray,
    cfg: DatasetConfig,
    rng: np.random.Generator,
    eligible: np.ndarray | None = None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    try:
        return natural_partition(owners, cfg.num_clients, rng, eligible)
    except ValueError as e:  # more clients than owners: a config error, before any compute
        raise ConfigError(str(e)) from None


def _no_owners(name: str) -> str:
    return (
        f"dataset.partition: 'natural' needs per-sample owner ids and {name} has none; "
        "allowed: iid, dirichlet, shards"
    )


def build_federated_data(
    cfg: DatasetConfig,
    seed: int,
    device: torch.device | str = "cpu",
    behaviour: ClientsConfig | None = None,
) -> FederatedData:
    """Load ``cfg.name``, partition it and cut each client's local train and test split.

    Under ``natural`` with owner ids on both splits (FEMNIST), a client is one owner with its own
    train and test samples, and the global test set is the union of the chosen owners' test
    samples; otherwise each client's indices are split by ``cfg.test_fraction`` and the global
    test set is the dataset's test split (``test_fraction`` 0: every client trains on its whole
    partition and keeps no local test split). A saved Hugging Face dataset
    (``dataset.name: hf:<folder>``) is built like own data, with its record
    (``fedcore.core.data.hub_config``).
    """
    if cfg.name.startswith(HUB_PREFIX):
        from fedcore.core.data.hub_config import from_config  # built by own data's path

        return from_config(cfg, seed, device)
    arrays = load_dataset(
        cfg.name,
        root=cfg.root,
        download=cfg.download,
        verify=cfg.verify,
        seed=seed,
        global_test_fraction=cfg.global_test_fraction,
        device=device,
        synthetic_samples=cfg.synthetic_samples,
    )
    trains, tests, x_local, y_local, x_test, y_test = _local_splits(arrays, cfg, seed)
    _check_every_client_trains(trains, cfg, len(arrays.y_train))
    x, y = arrays.x_train, arrays.y_train
    clients = []
    for k, (train, test) in enumerate(zip(trains, tests, strict=True)):
        tr, te = torch.as_tensor(train), torch.as_tensor(test)
        tensors = (x[tr], y[tr], x_local[te], y_local[te])
        clients.append(ClientData(k, *(t.to(device) for t in tensors)))
    x_val = y_val = None
    if cfg.val_fraction > 0:
        x_val, y_val, x_test, y_test = validation_split(x_test, y_test, cfg.val_fraction, seed)
    mix = label_mix([c.y_train for c in clients], arrays.num_classes)  # before any label noise
    noisy = _add_label_noise(clients, behaviour, arrays.num_classes, seed)
    return FederatedData(
        clients,
        x_test.to(device),
        y_test.to(device),
        arrays.num_classes,
        arrays.in_shape,
        noisy,
        [(np.asarray(tr), np.asarray(te)) for tr, te in zip(trains, tests, strict=True)],
        mix,
        built_from=built_key(cfg, seed, behaviour),
        x_val=None if x_val is None else x_val.to(device),
        y_val=None if y_val is None else y_val.to(device),
    )


def _local_splits(
    arrays: DatasetArrays, cfg: DatasetConfig, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray], torch.Tensor, torch.Tensor, torch.Tensor,
           torch.Tensor]:
    """Each client's train and test indices, the samples and labels its test indices point
    into, and the global test set (under ``natural`` with owners on both splits: the chosen
    owners' test samples)."""
    # indexed where loaded (the CPU; a synthetic dataset: the device), then moved: samples of
    # owners not chosen never reach the device
    x, y, x_test, y_test = arrays.x_train, arrays.y_train, arrays.x_test, arrays.y_test
    if cfg.partition == "natural" and arrays.owner_test is not None:
        trains, tests = natural_split(arrays, cfg, seed)
        keep = torch.as_tensor(np.concatenate(tests))
        return trains, tests, x_test, y_test, x_test[keep], y_test[keep]
    owners = None if arrays.owner_train is None else arrays.owner_train.numpy()
    parts = partition_indices(arrays.y_train.numpy(), cfg, seed, owners)
    splits = [
        split_local(idx, cfg.test_fraction, numpy_rng(seed, "local_split", k))
        for k, idx in enumerate(parts)
    ]
    return [s[0] for s in splits], [s[1] for s in splits], x, y, x_test, y_test


def _check_every_client_trains(trains: list[np.ndarray], cfg: DatasetConfig, n: int) -> None:
    """Refuse a partition that leaves a client no training sample (of the ``n``)."""
    empty = [k for k, train in enumerate(trains) if len(train) == 0]
    if empty:  # a client with nothing to train on failed mid-round (range() arg 3 is zero)
        raise ConfigError(
            f"dataset.num_clients={cfg.num_clients}: {len(empty)} client(s) (first: client "
            f"{empty[0]}) get no training sample of the {n} in {cfg.name!r}; allowed: "
            "fewer clients, or dataset.min_samples >= 1 (num_clients x min_samples <= samples)")


def _add_label_noise(
    clients: list[ClientData], behaviour: ClientsConfig | None, num_classes: int, seed: int
) -> np.ndarray:
    """Flip the labels of the noisy clients (``clients.noisy_fraction``, drawn with the seed);
    their ids."""
    noisy = np.empty(0, dtype=np.int64)
    if behaviour is not None and behaviour.noisy_fraction > 0:
        noisy = choose_clients(len(clients), behaviour.noisy_fraction, seed, "noisy")
        for k in noisy.tolist():
            c = clients[k]
            c.y_train = flip_labels(
                c.y_train,
                behaviour.noise_rate,
                num_classes,
                numpy_rng(seed, "label_noise", k),
            )
    return noisy


def validation_split(
    x: torch.Tensor, y: torch.Tensor, fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_val, y_val, x_test, y_test)``: a random ``fraction`` of the global test split (at
    least one sample, at least one left) held out for validation, deterministic in ``seed``."""
    n = len(y)
    k = min(max(1, round(n * fraction)), n - 1)
    order = numpy_rng(seed, "validation").permutation(n)
    val = torch.as_tensor(np.sort(order[:k]))
    test = torch.as_tensor(np.sort(order[k:]))
    return x[val], y[val], x[test], y[test]


_SHARED: OrderedDict[str, FederatedData] = OrderedDict()
_SHARED_LOCK = threading.Lock()
SHARED_KEEP = 4  # datasets kept by ``shared_federated_data`` (least recently used go)


def shared_federated_data(
    cfg: DatasetConfig,
    seed: int,
    device: torch.device | str = "cpu",
    behaviour: ClientsConfig | None = None,
) -> FederatedData:
    """``build_federated_data``, built once per process for the same arguments.

    The cells of a sweep that differ only in method share one loaded, partitioned dataset (the
    simulation never writes into it). The last ``SHARED_KEEP`` are kept.
    """
    key = json.dumps([cfg.model_dump(mode="json"), seed, str(device),
                      behaviour.model_dump(mode="json") if behaviour is not None else None],
                     sort_keys=True)
    with _SHARED_LOCK:
        if key in _SHARED:
            _SHARED.move_to_end(key)
            return _SHARED[key]
        data = build_federated_data(cfg, seed, device, behaviour)
        _SHARED[key] = data
        while len(_SHARED) > SHARED_KEEP:
            _SHARED.popitem(last=False)
        return data
