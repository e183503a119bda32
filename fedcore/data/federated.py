"""FederatedData: a dataset split among clients, each with local train and test tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fedcore.adversaries import choose_clients, flip_labels
from fedcore.clients.base import ClientData
from fedcore.config import ClientsConfig, DatasetConfig
from fedcore.data.datasets import load_dataset
from fedcore.data.partition import (
    dirichlet_partition,
    iid_partition,
    shard_partition,
    split_local,
)
from fedcore.seeding import numpy_rng


@dataclass
class FederatedData:
    clients: list[ClientData]
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    in_shape: tuple[int, int, int]
    noisy_clients: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @property
    def num_clients(self) -> int:
        return len(self.clients)


def partition_indices(labels: np.ndarray, cfg: DatasetConfig, seed: int) -> list[np.ndarray]:
    """Client index sets for the configured partitioner, deterministic in ``seed``."""
    rng = numpy_rng(seed, "partition")
    if cfg.partition == "iid":
        return iid_partition(len(labels), cfg.num_clients, rng)
    if cfg.partition == "dirichlet":
        return dirichlet_partition(labels, cfg.num_clients, cfg.alpha, rng, cfg.min_samples)
    return shard_partition(labels, cfg.num_clients, cfg.shards_per_client, rng)


def build_federated_data(
    cfg: DatasetConfig,
    seed: int,
    device: torch.device | str = "cpu",
    behaviour: ClientsConfig | None = None,
) -> FederatedData:
    arrays = load_dataset(
        cfg.name,
        root=cfg.root,
        download=cfg.download,
        verify=cfg.verify,
        seed=seed,
        global_test_fraction=cfg.global_test_fraction,
    )
    parts = partition_indices(arrays.y_train.numpy(), cfg, seed)
    x, y = arrays.x_train.to(device), arrays.y_train.to(device)
    clients = []
    for k, idx in enumerate(parts):
        train, test = split_local(idx, cfg.test_fraction, numpy_rng(seed, "local_split", k))
        tr, te = torch.as_tensor(train, device=device), torch.as_tensor(test, device=device)
        clients.append(ClientData(k, x[tr], y[tr], x[te], y[te]))
    noisy = np.empty(0, dtype=np.int64)
    if behaviour is not None and behaviour.noisy_fraction > 0:
        noisy = choose_clients(len(clients), behaviour.noisy_fraction, seed, "noisy")
        for k in noisy:
            c = clients[k]
            c.y_train = flip_labels(
                c.y_train,
                behaviour.noise_rate,
                arrays.num_classes,
                numpy_rng(seed, "label_noise", int(k)),
            )
    return FederatedData(
        clients,
        arrays.x_test.to(device),
        arrays.y_test.to(device),
        arrays.num_classes,
        arrays.in_shape,
        noisy,
    )
