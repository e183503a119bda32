"""Hugging Face datasets as federations: a ``datasets.Dataset`` or ``DatasetDict``, or a folder
written by ``save_to_disk``, with its feature and label columns named, split among clients by a
natural id column (one client per id), by fedcore's partitioners, or by a Flower Datasets
partitioner (docs/how-to/datasets.md). ``datasets`` is the optional extra ``hub``, imported
here only when such data is used."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.config import HUB_PREFIX, ConfigError
from fedcore.core.config.limits import shown
from fedcore.core.data.partition import natural_partition

PREFIX = HUB_PREFIX  # dataset.name: hf:<folder written by save_to_disk>
INDEX = "__fedcore_index__"  # the row numbers a partitioner's partitions carry back


def require() -> Any:
    """The ``datasets`` package, or a one-line ConfigError naming the extra that brings it."""
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError("dataset: Hugging Face data needs the optional extra hub "
                          "(pip install 'fedcore-fl[hub]')") from None
    return datasets


def is_hub(x: Any) -> bool:
    """Whether ``x`` is Hugging Face data: a ``Dataset`` / ``DatasetDict``, or a folder (or
    ``hf:`` name) written by ``save_to_disk``."""
    if type(x).__module__.startswith("datasets."):
        return True
    if isinstance(x, str | os.PathLike):
        folder = Path(str(x).removeprefix(PREFIX))
        return str(x).startswith(PREFIX) or any(
            (folder / f).is_file() for f in ("dataset_info.json", "dataset_dict.json"))
    return False


def load(x: Any, split: str | None = None) -> tuple[Any, Any, str]:
    """(train split, test split or None, where it came from) of Hugging Face data ``x``; a
    ``DatasetDict``'s ``split`` (default ``train``) trains and its ``test`` split, if any, is
    the global test set."""
    datasets = require()
    source = "datasets.Dataset from Python"
    if isinstance(x, str | os.PathLike):
        folder = Path(str(x).removeprefix(PREFIX)).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"dataset.name: {shown(str(x))} is not a folder written by "
                              "save_to_disk")
        try:
            x = datasets.load_from_disk(str(folder))
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(f"dataset.name: {shown(str(x))} cannot be read by "
                              f"datasets.load_from_disk ({type(exc).__name__})") from None
        source = f"Hugging Face dataset saved at {folder.resolve()}"
    if isinstance(x, datasets.DatasetDict):
        name = split or "train"
        if name not in x:
            raise ConfigError(f"split: {shown(name)} is not a split of the DatasetDict; "
                              f"allowed: {', '.join(x)}")
        test = x["test"] if "test" in x and name != "test" else None
        return x[name], test, f"{source}, split {name}"
    if not isinstance(x, datasets.Dataset):
        raise ConfigError(f"dataset: a {type(x).__name__}; allowed: a datasets.Dataset, a "
                          "DatasetDict, or a folder written by save_to_disk")
    return x, None, source


def column(ds: Any, name: str, what: str) -> np.ndarray:
    """Column ``name`` of ``ds`` as one numpy array (one row per sample)."""
    if name not in ds.column_names:
        raise ConfigError(f"{what}: no column {shown(name)}; allowed: "
                          f"{', '.join(ds.column_names)}")
    return np.asarray(ds.with_format("numpy")[name])


def arrays(ds: Any, features: str | Sequence[str], label: str) -> tuple[np.ndarray, np.ndarray]:
    """(samples, labels): one feature column as it is, several side by side (N x k)."""
    names = [features] if isinstance(features, str) else list(features)
    if not names:
        raise ConfigError("features: no column named; allowed: one or more column names")
    cols = [column(ds, n, "features").astype(np.float32) for n in names]
    x = cols[0] if len(cols) == 1 else np.concatenate([c.reshape(len(c), -1) for c in cols], 1)
    return (x[:, None] if x.ndim == 1 else x), column(ds, label, "label")


def by_partitioner(ds: Any, partitioner: Any) -> list[np.ndarray]:
    """Each partition's row numbers in ``ds``, from a Flower Datasets partitioner (any object
    with a ``dataset`` setter, ``num_partitions`` and ``load_partition(i)``)."""
    if not all(hasattr(partitioner, a) for a in ("num_partitions", "load_partition")):
        raise ConfigError(f"partitioner: a {type(partitioner).__name__} lacks num_partitions "
                          "or load_partition(i); allowed: a flwr_datasets partitioner")
    partitioner.dataset = ds.add_column(INDEX, list(range(len(ds))))
    return [np.asarray(partitioner.load_partition(i)[INDEX], dtype=np.int64)
            for i in range(int(partitioner.num_partitions))]


def by_id(ids: np.ndarray, rows: np.ndarray, num_clients: int | None,
          seed: int) -> list[np.ndarray]:
    """One client per distinct id among ``rows`` (``num_clients`` of them drawn with ``seed``
    when given, else all), each holding its rows."""
    _, codes = np.unique(ids[rows], return_inverse=True)
    n = int(codes.max()) + 1 if len(codes) else 0
    _, groups = natural_partition(codes, n if num_clients is None else num_clients,
                                  numpy_rng(seed, "partition"))
    return [rows[g] for g in groups]


def held_out(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, global test rows): ``fraction`` of ``n`` rows drawn with ``seed``."""
    perm = numpy_rng(seed, "global_test").permutation(n)
    n_test = max(1, int(round(fraction * n)))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


@dataclass
class HubData:
    """Hugging Face data as ``federate`` takes it: samples, labels, the global test set (None:
    drawn by ``federate``), client row lists (None: a fedcore partitioner) and the source."""

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    clients: list[np.ndarray] | None
    source: str


def prepare(
    x: Any, *, features: str | Sequence[str] | None, label: str | None, by: str | None,
    partitioner: Any, split: str | None, seed: int, num_clients: int | None,
    global_test_fraction: float,
) -> HubData:
    """Hugging Face data ``x`` as arrays and client rows: one client per id of column ``by``
    (``num_clients`` of them drawn with ``seed``, default all), or a partitioner's partitions;
    without a ``test`` split, ``global_test_fraction`` of the rows drawn with ``seed`` is the
    global test set."""
    if features is None or label is None:
        raise ConfigError("features: Hugging Face data needs features=COLUMN(S) and "
                          "label=COLUMN")
    if by is not None and partitioner is not None:
        raise ConfigError("by: give by=COLUMN or partitioner=..., not both")
    train, test, where = load(x, split)
    xs, ys = arrays(train, features, label)
    how = (f"clients by column {by}" if by is not None else
           f"clients by {type(partitioner).__name__}" if partitioner is not None else
           "a fedcore partition")
    out = HubData(xs, ys, None, None, None, f"{where} (features {features}, label {label}, {how})")
    if test is not None:
        out.x_test, out.y_test = arrays(test, features, label)
    if by is None and partitioner is None:
        return out
    rows = np.arange(len(ys))
    if test is None:
        rows, test_rows = held_out(len(ys), global_test_fraction, seed)
        out.x_test, out.y_test = xs[test_rows], ys[test_rows]
    if by is not None:
        clients = by_id(column(train, by, "by"), rows, num_clients, seed)
    else:
        clients = [p[np.isin(p, rows)] for p in by_partitioner(train, partitioner)]
    out.clients = [c for c in clients if len(c)]
    return out


__all__ = ["PREFIX", "HubData", "is_hub", "load", "prepare", "require"]
