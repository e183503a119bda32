"""The ``dataset`` block: a built-in, synthetic, Hugging Face or own dataset and its partition."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from fedcore.core.config import limits
from fedcore.core.config.blocks import PathSetting, Recorded

DATASETS = (
    "digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "femnist", "tiny_imagenet",
    "synthetic_cifar10",
)
SYNTHETIC_DATASETS = ("synthetic_cifar10",)  # generated from the seed (fedcore.core.data.synthetic)
NATURAL_DATASETS = ("femnist",)  # datasets with per-sample owner ids (partition=natural)
HUB_PREFIX = "hf:"  # dataset.name: hf:<folder written by save_to_disk> (fedcore.core.data.hub)
HUB_RECORDED = ("source", "digest", "partition_seed")  # recorded of such data, not hashed


ALPHA_MAX = 1e6  # dataset.alpha's documented maximum (docs/explanation/reliability.md)


class DatasetConfig(Recorded):
    """A built-in dataset by ``name``, or own data passed from Python (``digest`` set: see
    ``fedcore.core.data.own``), whose name, source and partition settings fedcore records here."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ("source", "digest", "partition_seed",
                                           "synthetic_samples", "features", "label", "by")
    ZERO_OMITTED: ClassVar[tuple[str, ...]] = ("holdout_clients", "val_fraction")
    name: str = "digits"
    root: PathSetting = "data"
    download: bool = False
    verify: bool = True
    partition: Literal["iid", "dirichlet", "shards", "natural", "given"] = "dirichlet"
    alpha: float = Field(0.1, gt=0)
    num_clients: int = Field(20, ge=1, le=limits.CLIENTS)
    min_samples: int = Field(10, ge=0)
    shards_per_client: int = Field(2, ge=1)
    test_fraction: float = Field(0.2, ge=0, lt=1)
    global_test_fraction: float = Field(0.2, gt=0, lt=1)
    val_fraction: float = Field(
        0.0, ge=0, lt=1, description="share of the global test split held out of it as a "
        "validation set (val/* metrics, early stopping); 0: none")
    source: str | None = None  # own data: where it came from
    digest: str | None = None  # own data: content digest (samples, labels, clients)
    partition_seed: int | None = Field(None, ge=0, le=limits.SEED)  # own data: its seed
    holdout_clients: float = Field(
        0.0, ge=0, lt=1, description="fraction of clients never sampled for training, drawn "
        "from the partition seed; the global model is evaluated on them (`unseen/*`)"
    )

    def held_out_count(self, num_clients: int | None = None) -> int:
        """How many of ``num_clients`` (default ``self.num_clients``) clients are held out:
        ``holdout_clients`` of them rounded to the nearest whole client."""
        n = self.num_clients if num_clients is None else num_clients
        return math.floor(self.holdout_clients * n + 0.5)

    features: str | list[str] | None = Field(
        None, description="`hf:` data only: the feature column (or columns, side by side)")
    label: str | None = Field(None, description="`hf:` data only: the label column")
    by: str | None = Field(
        None, description="`hf:` data with partition natural: the id column (one client per "
        "id, `num_clients` of them drawn with the seed)")
    synthetic_samples: int | None = Field(
        None, ge=10, description="synthetic datasets only: the number of train images (the "
        "global test set gets a fifth of it); unset: the real dataset's sizes (50,000 and "
        "10,000 for `synthetic_cifar10`)")

    @model_validator(mode="after")
    def _name_known(self) -> DatasetConfig:
        hub = self.name.startswith(HUB_PREFIX)
        if hub and (self.features is None or self.label is None):
            raise ValueError(f"dataset.{'features' if self.features is None else 'label'}: "
                             f"{self.name!r} needs its feature and label columns named")
        extra = [k for k in ("features", "label", "by") if getattr(self, k) is not None]
        if extra and not hub:
            raise ValueError(f"dataset.{extra[0]}: only for Hugging Face data "
                             f"(dataset.name: {HUB_PREFIX}<folder>); allowed: unset")
        if self.digest is None and self.name not in DATASETS and not hub:
            raise ValueError(
                f"dataset.name: unknown {self.name!r}; allowed: {', '.join(DATASETS)}, "
                f"{HUB_PREFIX}<folder written by save_to_disk> (own data: pass it from Python, "
                "see docs/python-api.md)"
            )
        if self.digest is not None and self.name in DATASETS:
            raise ValueError(
                f"dataset.name: {self.name!r} is a built-in dataset; give own data another name"
            )
        if self.synthetic_samples is not None and self.name not in SYNTHETIC_DATASETS:
            raise ValueError(
                f"dataset.synthetic_samples: only for a synthetic dataset "
                f"({', '.join(SYNTHETIC_DATASETS)}), not dataset.name={self.name!r}"
            )
        if self.partition == "given" and self.digest is None:
            raise ValueError(
                "dataset.partition: 'given' (client index lists) is for own data passed from "
                "Python; allowed: iid, dirichlet, shards, natural"
            )
        return self

    @field_validator("alpha")
    @classmethod
    def _alpha_at_most(cls, v: float) -> float:
        if v > ALPHA_MAX:  # alpha=1e308: numpy's Dirichlet draws overflow, one client gets all
            raise ValueError(
                f"must be in (0, {ALPHA_MAX:g}]: above that the Dirichlet split is IID to "
                "within 0.1 % (use dataset.partition=iid)"
            )
        return v
