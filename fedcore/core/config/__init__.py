"""The experiment config's schema: pydantic models, hashing, YAML reading, method files and
``key=value`` overrides.

This module imports no component: checking a config against the registered rules, client
objectives and compressors (and what they need from each other) is
[`fedcore.core.compose.configure.build_config`][fedcore.api.build_config], which builds on this
schema."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from fedcore.core.config import limits, safe_yaml
from fedcore.core.config.errors import ConfigError as ConfigError
from fedcore.core.config.numbers import StrictNumbers
from fedcore.core.config.system import SystemConfig

DATASETS = (
    "digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "femnist", "tiny_imagenet",
    "synthetic_cifar10",
)
SYNTHETIC_DATASETS = ("synthetic_cifar10",)  # generated from the seed (fedcore.core.data.synthetic)
NATURAL_DATASETS = ("femnist",)  # datasets with per-sample owner ids (partition=natural)
HUB_PREFIX = "hf:"  # dataset.name: hf:<folder written by save_to_disk> (fedcore.core.data.hub)
HUB_RECORDED = ("source", "digest", "partition_seed")  # recorded of such data, not hashed
MODELS = ("mlp", "cnn", "smallcnn", "resnet20", "resnet56", "resnet110")
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # package.module:Name
# A model factory passed from Python that no import path names (a lambda, a closure, a bound
# method): ``module:qualname`` with Python's <lambda>/<locals> parts (fedcore.core.models.external).
GIVEN_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[\w.<>]*<[\w.<>]*$")


UNHASHED = ("checkpoint_every", "checkpoint_dir")  # cannot change a run's numbers
# keys fedcore fills in for own data and models (what they are), not settings to give
RECORDED = ("dataset.source", "dataset.digest", "dataset.partition_seed", "model.code",
            "model.weights")


def _a_path(value: str) -> str:
    """A path setting within the limits of fedcore.core.config.limits (length, parts,
    characters)."""
    problem = limits.path_problem(value)
    if problem:
        raise ValueError(problem)
    return value


PathSetting = Annotated[str, AfterValidator(_a_path)]


class _Strict(StrictNumbers):
    """Unknown keys are errors; no float setting accepts inf or nan, no number true/false
    (docs/explanation/reliability.md)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, allow_inf_nan=False)


ALPHA_MAX = 1e6  # dataset.alpha's documented maximum (docs/explanation/reliability.md)


class _Recorded(_Strict):
    """A block with keys fedcore fills in for data or models from outside (``OPTIONAL``): left
    out of the resolved config while unset, so the config hashes of built-in ones stay as
    they were."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    # settings added later whose zero default changes nothing: left out while zero, so the
    # hashes of configs written before them stay as they were
    ZERO_OMITTED: ClassVar[tuple[str, ...]] = ()
    # blocks added later: left out while every key holds its default, for the same reason
    DEFAULT_OMITTED: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self.DEFAULT_OMITTED:
            block = type(self).model_fields[key].default_factory
            if block is not None and data.get(key) == block().model_dump(mode="json"):  # type: ignore[call-arg]
                data.pop(key, None)
        for key in self.OPTIONAL:
            if data.get(key) in (None, {}):
                data.pop(key, None)
        for key in self.ZERO_OMITTED:
            if data.get(key) == 0:
                data.pop(key, None)
        return data


class DatasetConfig(_Recorded):
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



class ModelConfig(_Recorded):
    """A built-in model by ``name``, or any ``nn.Module`` class or factory by import path
    (``package.module:Name``, called with ``kwargs``; see ``fedcore.core.models.external``)."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ("kwargs", "code", "weights")
    name: str = "cnn"
    norm: Literal["batch", "group"] = "batch"
    kwargs: dict[str, Any] = Field(default_factory=dict)  # import paths only
    code: str | None = None  # set by fedcore: digest of the defining file, package version
    # set by fedcore: initial weights of an instance, or of what a factory without an import
    # path (a lambda, a closure, a bound method) built, passed from Python
    weights: str | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in MODELS and not IMPORT_PATH.match(name) and not GIVEN_FACTORY.match(name):
            raise ValueError(
                f"unknown {name!r}; allowed: {', '.join(MODELS)}, or an nn.Module class or "
                "factory by import path (package.module:Name)"
            )
        return name

    @model_validator(mode="after")
    def _kwargs_for_own(self) -> ModelConfig:
        if self.kwargs and self.name in MODELS:
            raise ValueError(
                f"model.kwargs: only for a model given by import path, not {self.name!r}"
            )
        return self


class LocalConfig(_Strict):
    epochs: int = Field(5, ge=1)
    steps: int | None = Field(None, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(0.05, gt=0)
    lr_decay: float = Field(1.0, gt=0, le=1)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    # warmup_cosine (docs/methods/fedavg.md): lr * r / warmup_rounds for r <= warmup_rounds, then
    # cosine from lr down to lr_min at the last round; lr_decay applies to ``constant`` only.
    lr_schedule: Literal["constant", "warmup_cosine"] = "constant"
    lr_min: float = Field(0.0, ge=0)
    warmup_rounds: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _schedule_knobs(self) -> LocalConfig:
        if self.lr_schedule == "warmup_cosine" and self.lr_decay != 1.0:
            raise ValueError("local.lr_decay: must be 1.0 with lr_schedule=warmup_cosine")
        if self.lr_min > self.lr:
            raise ValueError(f"local.lr_min: must be <= local.lr={self.lr} (got {self.lr_min})")
        return self


class ClientsConfig(_Strict):
    """Misbehaving clients, to evaluate robust rules (none by default)."""

    noisy_fraction: float = Field(0.0, ge=0, le=1)
    noise_rate: float = Field(0.4, ge=0, le=1)
    byzantine_fraction: float = Field(0.0, ge=0, lt=1)
    attack: Literal["sign_flip", "scale", "gaussian"] = "sign_flip"
    attack_strength: float = Field(3.0, gt=0)


class MethodConfig(_Recorded):
    OPTIONAL: ClassVar[tuple[str, ...]] = ("sampler", "stages")

    name: str = Field("fedavg", min_length=1, max_length=limits.NAME_CHARS)
    client: dict[str, Any] = Field(default_factory=lambda: {"algorithm": "fedavg"})
    aggregator: dict[str, Any] = Field(default_factory=lambda: {"rule": "fedavg"})
    compression: dict[str, Any] = Field(default_factory=lambda: {"compressor": "none"})
    sampler: Any = Field(None, description="client sampler `{sampler: NAME, **hparams}` "
                         "(unset: uniform)")
    stages: Any = Field(None, description="stages around each update, each placed by its "
                        "side (client, wire, server): `[{stage: NAME, **hparams}]`")


class EngineConfig(_Strict):
    """How clients are trained (docs/how-to/gpu.md); ``engine=NAME`` sets ``backend``."""

    backend: Literal["auto", "sequential", "vectorised"] = "auto"
    max_clients_per_chunk: int | None = Field(None, ge=1)  # None: from free device memory




class PrivacyConfig(_Strict):
    """User-level differential privacy of the run and its accounting (docs/methods/dp_fedavg.md,
    docs/how-to/privacy.md): ``central`` DP-FedAvg on the server (McMahan et al. 2018),
    ``local``: the client-side ``clip_noise`` stage accounted per client, ``none``: off."""

    mechanism: Literal["none", "central", "local"] = Field(
        "none", description="central: the server clips each sampled client's delta, adds "
        "Gaussian noise to the sum and divides by the expected number of clients; local: the "
        "`clip_noise` stage of `method.stages` is accounted per client; none: no privacy")
    noise_multiplier: float | None = Field(
        None, ge=0, description="central: z, the noise std over the clip (N(0, (z C)^2) on the "
        "sum); unset: calibrated from `privacy.target_epsilon`")
    clip: float | None = Field(
        None, gt=0, description="central: C, the L2 bound on each client's delta (unset: 1.0)")
    delta: float | None = Field(
        None, gt=0, lt=1, description="the delta of the (epsilon, delta) reported; unset: "
        "1 / N^1.1 for N training clients")
    target_epsilon: float | None = Field(
        None, gt=0, description="central: choose z before round 1 so that epsilon after "
        "`rounds` rounds is at most this (the accountant's own search)")
    epsilon_budget: float | None = Field(
        None, gt=0, description="stop the run FINISHED after the last round whose epsilon stays "
        "within this budget (tag `fedcore.converged` says so)")
    sampling: Literal["poisson", "fixed"] = Field(
        "poisson", description="central: poisson (each training client joins a round with "
        "q = clients_per_round / N) or fixed (clients_per_round of N without replacement)")
    accountant: Literal["rdp", "pld"] = Field(
        "rdp", description="dp-accounting's accountant: rdp (Renyi DP, Poisson or fixed "
        "sampling) or pld (privacy loss distributions, Poisson sampling only)")
    clip_quantile: float | None = Field(
        None, gt=0, lt=1, description="central: adaptive clipping (Andrew et al. 2021): the "
        "share of clients whose delta the clip should leave unclipped; unset: a fixed clip")
    clip_lr: float = Field(
        0.2, gt=0, description="adaptive clipping: C <- C exp(-clip_lr (b - clip_quantile)), "
        "b the noised unclipped share of the round")
    clip_count_std: float | None = Field(
        None, gt=0, description="adaptive clipping: the std of the noise on the count of "
        "unclipped clients; unset: the larger of clients_per_round / 20 and z (the deltas' noise "
        "multiplier is then at most 1.155 z)")

    @model_validator(mode="after")
    def _consistent(self) -> PrivacyConfig:
        set_keys = [k for k in ("noise_multiplier", "clip", "target_epsilon", "epsilon_budget",
                                "delta") if getattr(self, k) is not None]
        if self.mechanism == "none" and set_keys:
            raise ValueError(f"privacy.{set_keys[0]}: set with privacy.mechanism=none; "
                             "allowed: privacy.mechanism central or local")
        if self.mechanism == "central":
            if (self.noise_multiplier is None) == (self.target_epsilon is None):
                raise ValueError("privacy.noise_multiplier: central DP needs exactly one of "
                                 "privacy.noise_multiplier and privacy.target_epsilon")
            if self.accountant == "pld" and self.sampling == "fixed":
                raise ValueError("privacy.accountant: pld cannot account privacy.sampling="
                                 "fixed (sampling without replacement); allowed: rdp")
        adaptive = [k for k in ("clip_quantile", "clip_count_std") if getattr(self, k) is not None]
        if adaptive and self.mechanism != "central":
            raise ValueError(f"privacy.{adaptive[0]}: adaptive clipping is for "
                             "privacy.mechanism=central; allowed: unset")
        if self.mechanism == "local":
            taken = [k for k in ("noise_multiplier", "clip", "target_epsilon") if k in set_keys]
            if taken:
                raise ValueError(f"privacy.{taken[0]}: local DP takes its clip and noise from "
                                 "the clip_noise stage of method.stages; allowed: unset")
        if (self.target_epsilon is not None and self.epsilon_budget is not None
                and self.target_epsilon > self.epsilon_budget):
            raise ValueError(f"privacy.target_epsilon: {self.target_epsilon:g} exceeds "
                             f"privacy.epsilon_budget={self.epsilon_budget:g}; allowed: at "
                             "most the budget")
        return self


class ExperimentConfig(_Recorded):
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


PACKAGE_DIR = Path(__file__).resolve().parents[2]  # fedcore/ (this file: fedcore/core/config/)
PACKAGED_CONFIGS = PACKAGE_DIR / "_configs"  # configs/ inside a wheel


def checkout_root() -> Path | None:
    """The source checkout this package runs from (configs/ and pyproject.toml beside the
    package), or None for an installed wheel."""
    here = PACKAGE_DIR.parent
    return here if (here / "configs").is_dir() and (here / "pyproject.toml").is_file() else None


def project_root() -> Path:
    """The project folder (mlflow.yml, stores, reports): $FEDCORE_HOME, else the checkout,
    else the current folder."""
    if os.environ.get("FEDCORE_HOME"):
        return Path(os.environ["FEDCORE_HOME"]).resolve()
    return checkout_root() or Path.cwd()


def config_dir() -> Path:
    """The shipped configs: ``$FEDCORE_HOME/configs`` when that folder exists, else the
    checkout's configs/, else the copy inside the installed package (``fedcore/_configs``)."""
    if os.environ.get("FEDCORE_HOME"):
        home = Path(os.environ["FEDCORE_HOME"]).resolve() / "configs"
        if home.is_dir():
            return home
    root = checkout_root()
    return root / "configs" if root is not None else PACKAGED_CONFIGS


def writable_config_dir() -> Path:
    """Where ``fedcore tune --best`` writes by default: `config_dir`, except that the copy
    inside an installed package is never written (``<project_root>/configs`` instead)."""
    folder = config_dir()
    return project_root() / "configs" if folder == PACKAGED_CONFIGS else folder


def method_names() -> list[str]:
    return sorted(p.stem for p in (config_dir() / "methods").glob("*.yaml"))


def load_method(name: str) -> dict[str, Any]:
    """The method named ``name`` in configs/methods, or the method file at an explicit path.

    A name is a plain file stem there (no ``/``, ``\\`` or ``..``); anything else must be the
    path of an existing ``.yaml`` file, e.g. ``method=./my_methods/fedx.yaml``.
    """
    if name.endswith((".yaml", ".yml")):
        limits.check_path("method", name)
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigError(f"method: method file {limits.shown(name)} does not exist")
        spec = read_yaml(path, "method file")
        spec.pop("docs", None)  # what the docs say of it (method_docs), not part of the method
        spec.setdefault("name", path.stem)
        return spec
    limits.check_string("method", name, limits.NAME_CHARS)
    if not name or any(part in name for part in ("/", "\\", "..")) or name.startswith("~"):
        raise ConfigError(
            f"method: {limits.shown(name)} is not a method name (names resolve inside "
            "configs/methods; "
            "give a method file as a path ending in .yaml); "
            f"allowed: {', '.join(method_names())}"
        )
    path = config_dir() / "methods" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"method: unknown method {limits.shown(name)}; allowed: {', '.join(method_names())}"
        )
    spec = read_yaml(path, "method file")
    spec.pop("docs", None)  # what the docs say of it (method_docs), not part of the method
    spec.setdefault("name", name)
    return spec


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": 1, "c": "x"}`` with YAML-typed values."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {limits.shown(item)}: expected KEY=VALUE, e.g. rounds=50")
        key, value = item.split("=", 1)
        if not key:
            raise ConfigError(f"override {limits.shown(item)}: empty key")
        limits.check_string("override key", key)
        limits.check_string(key.strip(), value)
        source = f"override {limits.shown(item)}"
        out[key.strip()] = safe_yaml.load(value, source) if value != "" else None
    return out


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def read_yaml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """The mapping in the YAML file ``path``, read within `fedcore.core.config.limits` (no duplicate
    keys, bounded aliases and depth, UTF-8); ``what`` names the file in errors."""
    data = safe_yaml.read_file(path, what) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {limits.shown(str(path))} must hold a mapping")
    try:
        limits.check_tree(data)
    except ConfigError as exc:
        raise ConfigError(f"{what} {limits.shown(str(path))}: {exc}") from None
    return data


def _one_line(exc: ValidationError, prefix: str = "", root: type[BaseModel] | None = None) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
    key = limits.clip(f"{prefix}.{loc}" if prefix and loc else (prefix or loc))
    if not key:
        return err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(root or ExperimentConfig, err["loc"][:-1])
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"{key}: unknown key{hint}"
    msg = err["msg"].removeprefix("Value error, ")
    if msg.startswith(f"{key}."):  # a block's own check names its key in full
        return msg
    if err["type"] in ("literal_error", "enum"):
        return f"{key}: {msg} (got {limits.shown(err.get('input'))})"
    if "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict):
        return f"{key}: {msg} (got {limits.shown(err['input'])})"
    return f"{key}: {msg}"


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc:
        field = model.model_fields.get(str(part))
        if (
            field is None
            or not isinstance(field.annotation, type)
            or not issubclass(field.annotation, BaseModel)
        ):
            return []
        model = field.annotation
    return list(model.model_fields)
