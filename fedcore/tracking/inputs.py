"""The run's federated dataset as an MLflow dataset input (the UI's "Dataset" column)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.core.data.federated import partition_digest

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput
    from mlflow.tracking import MlflowClient

    from fedcore.core.config import DatasetConfig
    from fedcore.core.records.run import RunView


def dataset_source(cfg: DatasetConfig) -> str:
    """Where the dataset's files are read from (digits: the copy shipped in the package)."""
    if cfg.name == "digits":
        from fedcore.core.data.digits import DIGITS_SOURCE

        return DIGITS_SOURCE
    return str(Path(cfg.root).resolve())


def dataset_input(sim: RunView) -> DatasetInput:
    """``sim``'s dataset as an MLflow dataset input (``dataset_description``)."""
    return as_dataset_input(dataset_description(sim))


def dataset_description(sim: RunView) -> dict[str, Any]:
    """Name, source, partition settings and partition digest of ``sim``'s clients, as plain
    data (``as_dataset_input`` makes the MLflow record).

    The digest hashes which samples each client holds: the same partition gives the same
    digest in every run, and a different seed, alpha, partitioner or client count another.
    """
    cfg = sim.cfg
    data = sim.data
    digest = cfg.dataset.digest  # own data: its content digest (fedcore.core.data.own)
    own = digest is not None
    profile = {
        "partition": cfg.dataset.partition,
        "alpha": cfg.dataset.alpha,
        "seed": cfg.dataset.partition_seed if own else cfg.seed,
        "clients": data.num_clients,
        "train_samples": int(sum(c.num_train for c in data.clients)),
        "global_test_samples": int(len(data.y_test)),
        "num_classes": int(data.num_classes),
    }
    if own:
        if cfg.dataset.partition != "dirichlet":
            del profile["alpha"]  # not a setting of this partition
        profile.update(test_fraction=cfg.dataset.test_fraction,
                       global_test_fraction=cfg.dataset.global_test_fraction)
    return {
        "name": cfg.dataset.name,
        "digest": digest if digest is not None else partition_digest(data),
        "source_type": "code" if own else "local",
        "source": json.dumps({"uri": cfg.dataset.source if own else dataset_source(cfg.dataset)}),
        "profile": profile,
    }


def as_dataset_input(description: dict[str, Any]) -> DatasetInput:
    """The MLflow dataset input of a ``dataset_description``."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    profile = description["profile"]
    dataset = Dataset(
        name=description["name"], digest=description["digest"],
        source_type=description["source_type"], source=description["source"],
        profile=json.dumps(profile),
    )
    tags = [InputTag("mlflow.data.context", "train")] + [
        InputTag(k, str(profile[k])) for k in ("partition", "alpha", "seed", "clients")
        if k in profile
    ]
    return DatasetInput(dataset, tags)


def log_dataset_input(client: MlflowClient, run_id: str, dataset: DatasetInput) -> None:
    """Log ``dataset`` as the run's input. MLflow stores a dataset once per experiment: when runs
    of the same data start together (a study's or sweep's parallel workers), all but one insert
    fail on the unique (experiment, name, digest); the dataset then exists and a second call
    links it."""
    try:
        client.log_inputs(run_id, datasets=[dataset])
    except Exception as exc:
        if "unique constraint" not in str(exc).lower():
            raise
        client.log_inputs(run_id, datasets=[dataset])
