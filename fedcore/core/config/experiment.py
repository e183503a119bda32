"""The whole experiment config: its blocks, the run's settings and its hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

from pydantic import Field, model_validator

from fedcore.core.config import limits
from fedcore.core.config.blocks import PathSetting, Recorded
from fedcore.core.config.clients import ClientsConfig
from fedcore.core.config.dataset import HUB_PREFIX, HUB_RECORDED, NATURAL_DATASETS, DatasetConfig
from fedcore.core.config.engine import EngineConfig
from fedcore.core.config.local import LocalConfig
from fedcore.core.config.method import MethodConfig
from fedcore.core.config.model import ModelConfig
from fedcore.core.config.privacy import PrivacyConfig
from fedcore.core.config.system import SystemConfig

UNHASHED = ("checkpoint_every", "checkpoint_dir")  # cannot change a run's numbers
# keys fedcore fills in for own data and models (what they are), not settings to give
RECORDED = ("dataset.source", "dataset.digest", "dataset.partition_seed", "model.code",
            "model.weights")


class ExperimentConfig(Recorded):
    OPTIONAL: ClassVar[tuple[str, ...]] = ("callbacks",)
    DEFAULT_OMITTED: ClassVar[tuple[str, ...]] = ("privacy", "system")

    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    method: MethodConfig = Field(default_factory=MethodConfig)
    rounds: int = Field(60, ge=1)
    clients_per_round: int = Field(5, ge=1, le=limits.CLIENTS)
    local: LocalConfig = Field(default_factory=LocalConfig)
    clients: ClientsConfig = Field(default_factory=ClientsConfig)
    seed: int = Field(0, ge=0, le=limits.SEED)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda|cuda:\d+|mps)$")
    eval_every: int = Field(1, ge=1)
    target_accuracy: float | None = Field(None, gt=0, le=1)
    last_k: int = Field(5, ge=1, description="evaluations averaged by final/accuracy_last_k, "
                        "the default primary endpoint of a comparison")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    system: SystemConfig = Field(default_factory=SystemConfig)
    callbacks: Any = Field(None, description="callbacks of the run, in order: "
                           "`[{callback: NAME, **hparams}]`")
    # resumable runs (docs/how-to/checkpoints.md); not part of config_hash()
    checkpoint_every: int = Field(0, ge=0)
    checkpoint_dir: PathSetting = ".fedcore/checkpoints"


    @model_validator(mode="after")
    def _clients_fit(self) -> ExperimentConfig:
        ds = self.dataset
        if self.clients_per_round > ds.num_clients:
            raise ValueError(
                f"clients_per_round={self.clients_per_round} exceeds "
                f"dataset.num_clients={ds.num_clients}; allowed: 1..{ds.num_clients}"
            )
        spare = ds.num_clients - self.clients_per_round  # clients a holdout may take
        if ds.holdout_clients > 0 and not 1 <= ds.held_out_count() <= spare:
            allowed = (f"{0.5 / ds.num_clients:.3g}..{spare / ds.num_clients:.3g} or 0"
                       if spare else "0 (clients_per_round takes every client)")
            raise ValueError(
                f"dataset.holdout_clients={ds.holdout_clients:g} holds out "
                f"{ds.held_out_count()} of dataset.num_clients={ds.num_clients}; it must hold "
                f"out at least one and leave clients_per_round={self.clients_per_round} to "
                f"train; allowed: {allowed}"
            )
        return self

    @model_validator(mode="after")
    def _dataset_supports(self) -> ExperimentConfig:
        ds = self.dataset
        if ds.partition == "natural" and ds.name.startswith(HUB_PREFIX) and ds.by is None:
            raise ValueError("dataset.by: partition natural of Hugging Face data needs the id "
                             "column; allowed: a column name")
        if ds.by is not None and ds.partition != "natural":
            raise ValueError(f"dataset.by: only with dataset.partition=natural (got "
                             f"{ds.partition}); allowed: unset")
        if (ds.partition == "natural" and ds.name not in NATURAL_DATASETS
                and not ds.name.startswith(HUB_PREFIX)):
            raise ValueError(
                f"dataset.partition: 'natural' needs per-sample owner ids, which "
                f"dataset.name={ds.name!r} lacks (only {', '.join(NATURAL_DATASETS)} has them); "
                "allowed: iid, dirichlet, shards"
            )
        if ds.download and ds.name == "femnist":
            raise ValueError(
                "dataset.download: femnist cannot be downloaded (LEAF's preprocess.sh writes "
                "its JSON files, see docs/how-to/datasets.md); allowed: false"
            )
        return self

    def resolved(self) -> dict[str, Any]:
        """The full resolved config as plain data (what is recorded with every run)."""
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """Hash of the keys that can change the numbers (``UNHASHED`` keys are left out). A
        saved Hugging Face dataset (``dataset.name: hf:<folder>``) is hashed by its settings, as
        a built-in dataset on disk is: what fedcore records of it once built (``HUB_RECORDED``)
        is left out, so a sweep finds the runs of its cells."""
        keyed = {k: v for k, v in self.resolved().items() if k not in UNHASHED}
        if self.dataset.name.startswith(HUB_PREFIX):
            keyed["dataset"] = {k: v for k, v in keyed["dataset"].items()
                                if k not in HUB_RECORDED}
        blob = json.dumps(keyed, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
