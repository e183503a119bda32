"""``dataset.name: hf:<folder>``: a folder written by Hugging Face's ``save_to_disk`` as the
config's dataset (docs/how-to/datasets.md), built like own data and recorded with its source
and content digest."""

from __future__ import annotations

from typing import Any

import torch

from fedcore.core.config import ConfigError, DatasetConfig
from fedcore.core.config.limits import shown
from fedcore.core.data.federated import FederatedData
from fedcore.core.data.hub import PREFIX
from fedcore.core.data.own import federate


def is_hub_name(name: str) -> bool:
    return name.startswith(PREFIX)


def from_config(cfg: DatasetConfig, seed: int, device: torch.device | str) -> FederatedData:
    """The data of ``cfg`` (``dataset.name: hf:<folder>``): ``dataset.features`` and
    ``dataset.label`` name the columns; ``partition: natural`` makes one client per id of
    column ``dataset.by`` (``num_clients`` of them, drawn with the seed), other partitions
    split as for built-in data. Its record is ``cfg`` with the source and the content digest;
    a digest already recorded must match."""
    settings: dict[str, Any] = {"test_fraction": cfg.test_fraction, "num_clients": cfg.num_clients,
                "global_test_fraction": cfg.global_test_fraction}
    if cfg.partition != "natural":
        settings.update(partition=cfg.partition, alpha=cfg.alpha, min_samples=cfg.min_samples,
                        shards_per_client=cfg.shards_per_client)
    data = federate(cfg.name, features=cfg.features, label=cfg.label,
                    by=cfg.by if cfg.partition == "natural" else None, name="hub", seed=seed,
                    device=device, **settings)
    assert data.record is not None
    digest = data.record.digest
    if cfg.digest is not None and cfg.digest != digest:
        raise ConfigError(f"dataset.digest: the data at {shown(cfg.name)} has digest {digest}, "
                          f"not the recorded {cfg.digest}; allowed: the recorded data")
    data.record = cfg.model_copy(update={"source": data.record.source, "digest": digest,
                                         "partition_seed": seed})
    return data


__all__ = ["from_config", "is_hub_name"]
