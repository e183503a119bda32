"""Own data from Python: numpy arrays, tensors or a torch ``Dataset``, split among clients by
fedcore's partitioners (or by given client index lists), and recorded truthfully.

`federate` returns a `FederatedData` that carries its
record: a ``DatasetConfig`` with the data's name, source, partition settings and content digest.
``Simulation(cfg, data=...)`` writes that record into its config (so the config hash, the MLflow
params and the run's dataset input are the data's, never a built-in dataset's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.config import ConfigError, DatasetConfig, ExperimentConfig
from fedcore.core.config.messages import one_line
from fedcore.core.data import hub
from fedcore.core.data.client_data import ClientData, label_mix
from fedcore.core.data.federated import FederatedData, built_key, partition_indices
from fedcore.core.data.partition import split_local

ArrayLike = np.ndarray | torch.Tensor | Sequence[Any]
HAND_MADE = "FederatedData built in Python"
MAX_SAMPLES = 10_000_000  # samples a torch Dataset may hold (it is read into memory)
MAX_CLASSES = 100_000  # labels lie in 0..MAX_CLASSES-1 (the model's output width)


def _labels(y: Any, what: str, num_classes: int | None) -> torch.Tensor:
    """Integer labels (int64) in ``0..num_classes-1`` (default ``MAX_CLASSES``), or a
    one-line ``ConfigError`` naming ``what``: floats with a fraction, NaN, negative or too
    large labels are refused, not truncated."""
    try:
        arr = np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: labels must be integers ({exc})") from None
    limit = num_classes if num_classes is not None else MAX_CLASSES
    allowed = f"allowed: integers in 0..{limit - 1}"
    if arr.dtype.kind not in "biuf":
        raise ConfigError(f"{what}: labels must be integers, got dtype {arr.dtype}; {allowed}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) if arr.size else np.zeros(0, bool)
        if bad.any():
            raise ConfigError(f"{what}: label {arr[bad].flat[0].item()!r} is not a whole number "
                              f"(labels are not rounded); {allowed}")
    if arr.size and (arr.min() < 0 or arr.max() >= limit):
        worst = arr.min() if arr.min() < 0 else arr.max()
        raise ConfigError(f"{what}: label {worst.item()!r} is out of range; {allowed}"
                          + ("" if num_classes is not None else " (or give num_classes)"))
    return torch.as_tensor(arr.astype(np.int64))


def _dataset_length(x: Any, what: str) -> int:
    try:
        n = len(x)
    except Exception as exc:  # noqa: BLE001  (a Dataset's own __len__ may raise anything)
        raise ConfigError(f"{what}: len() of the Dataset failed ({type(exc).__name__})") \
            from None
    if not 1 <= n <= MAX_SAMPLES:
        raise ConfigError(f"{what}: a Dataset of {n} samples; allowed: 1..{MAX_SAMPLES} (it "
                          "is read into memory)")
    return n


def _tensors(
    x: Any, y: Any, what: str, label_what: str, num_classes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(samples as float32, labels as int64) from arrays, tensors or a map-style Dataset."""
    if y is None:
        if not hasattr(x, "__getitem__") or not hasattr(x, "__len__"):
            raise ConfigError(f"{what}: give labels, or a torch Dataset of (sample, label) pairs")
        items = [x[i] for i in range(_dataset_length(x, what))]
        xs = torch.stack([torch.as_tensor(np.asarray(s), dtype=torch.float32) for s, _ in items])
        ys = _labels([label for _, label in items], f"{what} (its labels)", num_classes)
        return xs, ys
    xs = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    ys = _labels(y, label_what, num_classes)
    if xs.ndim < 2 or ys.ndim != 1 or len(xs) != len(ys):
        raise ConfigError(
            f"{what}: samples must be shaped (N, ...) and labels (N,), got "
            f"{tuple(xs.shape)} and {tuple(ys.shape)}"
        )
    if not len(ys):
        raise ConfigError(f"{what}: no samples; allowed: at least 1")
    return xs, ys


def source_of(x: Any, y: Any) -> str:
    """What the data came from, when the caller does not say."""
    if y is None:
        cls = type(x)
        return f"torch Dataset {cls.__module__}.{cls.__qualname__}"
    return f"{type(x).__module__}.{type(x).__qualname__} from Python"


def content_digest(data: FederatedData) -> str:
    """A digest of ``data``: the same data split the same way, the same digest.

    Args:
        data: the federated data.

    Returns:
        16 hex characters of the sha256 of every client's samples and labels (train and local
        test, in client order) and of the global test set.
    """
    h = hashlib.sha256()

    def add(t: torch.Tensor) -> None:
        a = t.detach().cpu().contiguous().numpy()
        h.update(f"{a.shape}|{a.dtype}|".encode())
        h.update(a.tobytes())

    for c in data.clients:
        h.update(f"client {c.client_id}|".encode())
        for t in (c.x_train, c.y_train, c.x_test, c.y_test):
            add(t)
    h.update(b"global test|")
    add(data.x_test)
    add(data.y_test)
    return h.hexdigest()[:16]


def federate(
    x: Any,
    y: ArrayLike | None = None,
    *,
    x_test: Any = None,
    y_test: ArrayLike | None = None,
    clients: Sequence[ArrayLike] | None = None,
    name: str = "custom",
    source: str | None = None,
    seed: int = 0,
    num_classes: int | None = None,
    device: torch.device | str = "cpu",
    features: str | Sequence[str] | None = None,
    label: str | None = None,
    by: str | None = None,
    partitioner: Any = None,
    split: str | None = None,
    **partition: Any,
) -> FederatedData:
    """Split own data among clients, as fedcore splits its built-in datasets.

    Args:
        x: samples (N, ...) as a numpy array or tensor, a torch ``Dataset`` of
            (sample, label) pairs, or Hugging Face data (a ``datasets.Dataset`` or
            ``DatasetDict``, or a folder written by ``save_to_disk``; ``fedcore.core.data.hub``).
        y: integer labels (N,); None when ``x`` is a ``Dataset``.
        x_test: the global test samples (likewise); without them a ``global_test_fraction``
            of the samples (drawn with ``seed``) is the global test set.
        y_test: the global test labels.
        clients: each client's sample indices into ``x`` instead of a partitioner (partition
            ``given``; then ``x_test`` is needed).
        name: the data's name in the config, the run name and MLflow.
        source: what the data is (default: the array or Dataset type).
        seed: seeds the partition and the local train/test splits, as the run seed does.
        num_classes: the number of classes (default: the largest label + 1).
        device: where the tensors live.
        features: Hugging Face data: the feature column (or columns, side by side).
        label: Hugging Face data: the label column.
        by: Hugging Face data: one client per distinct value of this column (``num_clients``
            of them drawn with ``seed``, default all).
        partitioner: Hugging Face data: a Flower Datasets partitioner (any object with a
            ``dataset`` setter, ``num_partitions`` and ``load_partition(i)``); one client per
            partition.
        split: a ``DatasetDict``'s training split (default ``train``; its ``test`` split, if
            any, is the global test set).
        **partition: the ``dataset`` settings (``partition=iid|dirichlet|shards``, ``alpha``,
            ``num_clients``, ``min_samples``, ``shards_per_client``, ``test_fraction``,
            ``global_test_fraction``; defaults as in the config).

    Returns:
        The clients' local train and test tensors and the global test set, with their record
        (name, source, partition settings and content digest).
    """
    _check_num_classes(num_classes)
    x, y, x_test, y_test, clients, source = _unpack_hub(
        x, y, x_test, y_test, clients, source, seed, partition,
        features=features, label=label, by=by, partitioner=partitioner, split=split)
    xs, ys = _tensors(x, y, "x", "y", num_classes)
    settings = _settings(name, source or source_of(x, y), seed, clients, partition)
    xt, yt, train_idx = _global_test(xs, ys, x_test, y_test, clients, settings, seed, num_classes)
    if clients is not None:
        parts = _given_parts(clients, len(ys))
    else:
        local = partition_indices(ys[train_idx].numpy(), settings, seed)
        parts = [train_idx[p] for p in local]
    return _assemble(xs, ys, xt, yt, parts, settings, seed, num_classes, device)


def _check_num_classes(num_classes: int | None) -> None:
    """Refuse a ``num_classes`` that is not an integer in 2..MAX_CLASSES."""
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(
            num_classes, int | np.integer) or not 2 <= num_classes <= MAX_CLASSES):
        raise ConfigError(f"num_classes: {num_classes!r}; allowed: an integer in "
                          f"2..{MAX_CLASSES}")


def _unpack_hub(
    x: Any, y: Any, x_test: Any, y_test: Any, clients: Any, source: str | None, seed: int,
    partition: dict[str, Any], **hub_args: Any,
) -> tuple[Any, Any, Any, Any, Any, str | None]:
    """Hugging Face data as samples, labels, test set and client lists (``num_clients`` taken
    out of ``partition`` for a natural split); other data unchanged, refusing the hub's
    arguments."""
    if hub.is_hub(x):
        if y is not None or x_test is not None or clients is not None:
            raise ConfigError("y: Hugging Face data names its columns (features=, label=); "
                              "allowed: no y, x_test or clients with it")
        natural = hub_args["by"] is not None or hub_args["partitioner"] is not None
        got = hub.prepare(x, **hub_args, seed=seed,
                          num_clients=partition.pop("num_clients", None) if natural else None,
                          global_test_fraction=partition.get("global_test_fraction", 0.2))
        return got.x, got.y, got.x_test, got.y_test, got.clients, source or got.source
    if any(v is not None for v in hub_args.values()):
        raise ConfigError("features: features, label, by, partitioner and split are for "
                          "Hugging Face data; allowed: unset with arrays or a torch Dataset")
    return x, y, x_test, y_test, clients, source


def _settings(name: str, source: str, seed: int, clients: Any,
              partition: dict[str, Any]) -> DatasetConfig:
    """The data's ``dataset`` settings (its digest still unknown); given client lists set
    partition ``given`` and the client count."""
    if clients is not None:
        if partition.get("num_clients", len(clients)) != len(clients):
            raise ConfigError(f"dataset.num_clients: {partition['num_clients']} given with "
                              f"{len(clients)} client index lists")
        partition.update(partition="given", num_clients=len(clients))
    elif partition.get("partition") == "given":
        raise ConfigError("dataset.partition: 'given' needs the client index lists (clients=...)")
    try:
        settings = DatasetConfig(name=name, source=source, digest="-", partition_seed=seed,
                                 **partition)
    except ValidationError as exc:
        raise ConfigError(one_line(exc, "dataset", DatasetConfig)) from None
    if settings.partition == "natural":
        raise ConfigError("dataset.partition: 'natural' needs owner ids; allowed: iid, "
                          "dirichlet, shards, or client index lists (clients=...)")
    return settings


def _global_test(
    xs: torch.Tensor, ys: torch.Tensor, x_test: Any, y_test: Any, clients: Any,
    settings: DatasetConfig, seed: int, num_classes: int | None,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """The global test samples and labels (given, or a ``global_test_fraction`` drawn with the
    seed) and the indices of the samples left to train on."""
    if x_test is not None:
        xt, yt = _tensors(x_test, y_test, "x_test", "y_test", num_classes)
        if tuple(xt.shape[1:]) != tuple(xs.shape[1:]):
            raise ConfigError(f"x_test: samples of shape {tuple(xt.shape[1:])}, those of x are "
                              f"{tuple(xs.shape[1:])}; allowed: the same sample shape as x")
        return xt, yt, np.arange(len(ys))
    if clients is not None:
        raise ConfigError("dataset: with client index lists (clients=...), give x_test/y_test")
    perm = numpy_rng(seed, "global_test").permutation(len(ys))
    n_test = max(1, int(round(settings.global_test_fraction * len(ys))))
    xt, yt = xs[np.sort(perm[:n_test])], ys[np.sort(perm[:n_test])]
    return xt, yt, np.sort(perm[n_test:])


def _given_parts(clients: Sequence[ArrayLike], n: int) -> list[np.ndarray]:
    """The given client index lists as int64 arrays: whole, within 0..n-1, none empty."""
    raw = [np.asarray(c) for c in clients]
    floats = [k for k, p in enumerate(raw) if len(p) and p.dtype.kind not in "iu"]
    if floats:  # 1.7 was truncated to 1
        raise ConfigError(f"clients: client {floats[0]}'s indices are "
                          f"{raw[floats[0]].dtype}; allowed: integer sample indices")
    parts = [p.astype(np.int64) for p in raw]
    bad = [k for k, p in enumerate(parts) if len(p) and (p.min() < 0 or p.max() >= n)]
    if bad:
        raise ConfigError(f"clients: client {bad[0]} has indices outside 0..{n - 1}")
    empty = [k for k, p in enumerate(parts) if not len(p)]
    if empty:
        raise ConfigError(f"clients: client {empty[0]} has no samples; allowed: at least "
                          "1 index per client")
    return parts


def _assemble(
    xs: torch.Tensor, ys: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor,
    parts: list[np.ndarray], settings: DatasetConfig, seed: int, num_classes: int | None,
    device: torch.device | str,
) -> FederatedData:
    """Each client's local train/test split of its samples, the global test set, and the
    record with the content digest."""
    splits = [split_local(p, settings.test_fraction, numpy_rng(seed, "local_split", k))
              for k, p in enumerate(parts)]
    classes = int(num_classes or int(max(int(ys.max()), int(yt.max()))) + 1)
    if classes < 2:  # one-class data scored 1.0 as a 1-class problem
        raise ConfigError("y: every label is 0 (one class); allowed: labels of at least 2 "
                          "classes, or num_classes=N with N >= 2")
    client_data = []
    for k, (tr, te) in enumerate(splits):
        tr_t, te_t = torch.as_tensor(tr), torch.as_tensor(te)
        tensors = (xs[tr_t], ys[tr_t], xs[te_t], ys[te_t])
        client_data.append(ClientData(k, *(t.to(device) for t in tensors)))
    data = FederatedData(
        client_data, xt.to(device), yt.to(device), classes, tuple(int(s) for s in xs.shape[1:]),
        partition=[(np.asarray(tr), np.asarray(te)) for tr, te in splits],
        clean_label_mix=label_mix([c.y_train for c in client_data], classes),
    )
    data.record = settings.model_copy(update={"digest": content_digest(data)})
    return data


def hand_made_record(data: FederatedData) -> DatasetConfig:
    """The record of a ``FederatedData`` built by hand: its content digest, its client count and
    its observed local and global test fractions."""
    local_train = sum(c.num_train for c in data.clients)
    local_test = sum(len(c.y_test) for c in data.clients)
    total = local_train + local_test + len(data.y_test)
    return DatasetConfig(
        name="custom", source=HAND_MADE, digest=content_digest(data), partition="given",
        num_clients=data.num_clients, min_samples=0,
        test_fraction=round(local_test / max(local_train + local_test, 1), 4),
        global_test_fraction=min(max(round(len(data.y_test) / max(total, 1), 4), 1e-4), 0.9999),
    )


def config_with_data(cfg: ExperimentConfig, data: FederatedData) -> ExperimentConfig:
    """``cfg`` recording ``data``: unchanged for data fedcore built from this very config (a
    sweep's shared data), else the data's record (or, for a hand-made ``FederatedData``, its
    content digest) as the ``dataset`` block, with ``cfg``'s ``holdout_clients``."""
    if data.record is None and data.built_from == built_key(cfg.dataset, cfg.seed, cfg.clients):
        return cfg
    if cfg.clients.noisy_fraction > 0:
        raise ConfigError(
            "clients.noisy_fraction: label noise is applied when fedcore builds a built-in "
            "dataset, not to own data; allowed: 0"
        )
    if cfg.dataset.val_fraction > 0 and data.x_val is None:
        raise ConfigError(
            "dataset.val_fraction: fedcore holds a validation split out of a built-in dataset's "
            "test split, not out of own data; allowed: 0"
        )
    record = data.record if data.record is not None else hand_made_record(data)
    tree = cfg.resolved()
    # the clients held out of training are the run's choice, not the data's: kept from cfg
    tree["dataset"] = {**record.model_dump(mode="json"),
                       "holdout_clients": cfg.dataset.holdout_clients or record.holdout_clients}
    try:
        return ExperimentConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(one_line(exc)) from None


__all__ = ["config_with_data", "content_digest", "federate"]
