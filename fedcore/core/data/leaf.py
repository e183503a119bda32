"""FEMNIST in LEAF's JSON format, with each sample's writer as its owner id.

LEAF (github.com/TalwalkarLab/leaf, ``data/femnist``) writes JSON files of the form
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 floats], ...],
"y": [int, ...]}}}``. fedcore reads, under ``<root>/femnist/``:

- ``train/*.json`` and ``test/*.json`` (LEAF's ``-t sample`` output: each writer's own samples
  split into train and test), or, when those are absent,
- ``all_data/*.json`` (whole writers); each writer's samples are then split here, seeded, with a
  share ``global_test_fraction`` (at least one) going to test, as LEAF's ``-t sample`` does.

Images are 1 x 28 x 28 float32 with the values LEAF gives (pixel / 255 in [0, 1], white
background = 1.0), not re-normalised; labels are LEAF's 62 classes (0-9 digits, 10-35 upper case,
36-61 lower case). Writers keep the order of first appearance over the sorted file names. The
JSON is parsed with ``orjson`` when it is installed (it comes with Prefect; about 4x faster than
the standard library's ``json``, which is used otherwise); nothing is cached.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.data.arrays import DatasetArrays, DatasetUnavailableError
from fedcore.core.data.partition import group_by_owner, split_local

FEMNIST_CLASSES = 62
_PIXELS = 28 * 28
_EXPECTED = (
    "expected train/*.json and test/*.json, or all_data/*.json, as written by LEAF's "
    "data/femnist/preprocess.sh"
)


def _default_loads() -> Callable[[bytes], Any]:
    try:
        import orjson
    except ImportError:
        return json.loads
    return orjson.loads


loads = _default_loads()  # bytes -> parsed JSON


def femnist_files_present(root: str | Path) -> tuple[Path, list[Path], list[Path], list[Path]]:
    """``<root>/femnist`` and its train, test and all_data JSON files; DatasetUnavailableError
    unless train and test, or all_data, are there."""
    folder = Path(root).expanduser().resolve() / "femnist"
    train_files, test_files = _json_files(folder / "train"), _json_files(folder / "test")
    all_files = _json_files(folder / "all_data")
    if not (train_files and test_files) and not all_files:
        partial = ""
        if train_files or test_files:
            have, lack = ("train", "test") if train_files else ("test", "train")
            partial = f"; found {have}/*.json but no {lack}/*.json"
        raise DatasetUnavailableError(
            f"dataset 'femnist': files not found in {folder} ({_EXPECTED}{partial}); fedcore "
            "cannot download FEMNIST, see docs/how-to/datasets.md"
        )
    return folder, train_files, test_files, all_files


def load_femnist(
    root: str | Path, seed: int = 0, global_test_fraction: float = 0.2
) -> DatasetArrays:
    """FEMNIST from ``<root>/femnist`` with per-sample writer ids (``owner_train/test``)."""
    folder, train_files, test_files, all_files = femnist_files_present(root)
    names: dict[str, int] = {}
    try:
        if train_files and test_files:
            x_tr, y_tr, o_tr = _read_files(train_files, names)
            x_te, y_te, o_te = _read_files(test_files, names)
        else:
            x, y, o = _read_files(all_files, names)
            tr, te = _split_writers(o, seed, global_test_fraction)
            x_tr, y_tr, o_tr, x_te, y_te, o_te = x[tr], y[tr], o[tr], x[te], y[te], o[te]
    except (OSError, ValueError, KeyError, TypeError) as e:
        cause = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        raise DatasetUnavailableError(
            f"dataset 'femnist': files in {folder} could not be read ({cause}); {_EXPECTED}"
        ) from e
    return DatasetArrays(
        _images(x_tr),
        torch.from_numpy(y_tr),
        _images(x_te),
        torch.from_numpy(y_te),
        FEMNIST_CLASSES,
        "femnist",
        owner_train=torch.from_numpy(o_tr),
        owner_test=torch.from_numpy(o_te),
        owner_names=tuple(names),
    )


def _images(pixels: np.ndarray) -> torch.Tensor:
    """N x 784 -> N x 1 x 28 x 28 (LEAF's rows are row-major 28 x 28 images)."""
    return torch.from_numpy(np.ascontiguousarray(pixels)).view(-1, 1, 28, 28)


def _json_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _read_files(
    files: list[Path], names: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixels (N x 784 float32), labels and writer ids of all users in ``files``; ``names`` maps
    writer name -> id and grows with writers seen for the first time."""
    xs, ys, owners = [], [], []
    for path in files:
        data = loads(path.read_bytes())
        for user in data["users"]:
            record = data["user_data"][user]
            x = np.asarray(record["x"], dtype=np.float32)
            x = x.reshape(0, _PIXELS) if x.size == 0 else x
            if x.ndim != 2 or x.shape[1] != _PIXELS:
                raise ValueError(
                    f"{path.name}: user {user}: x has shape {x.shape}, expected (n, {_PIXELS})"
                )
            y = np.asarray(record["y"], dtype=np.int64).reshape(-1)
            if len(x) != len(y):
                raise ValueError(f"{path.name}: user {user}: {len(x)} images but {len(y)} labels")
            if len(y) and (y.min() < 0 or y.max() >= FEMNIST_CLASSES):
                raise ValueError(f"{path.name}: user {user}: labels outside 0..61")
            xs.append(x)
            ys.append(y)
            owners.append(np.full(len(y), names.setdefault(str(user), len(names)), np.int64))
    if not xs:
        raise ValueError("no users in the JSON files")
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(owners)


def _split_writers(
    owners: np.ndarray, seed: int, test_fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each writer's samples split into train and test (seeded per writer id)."""
    parts = [
        split_local(idx, test_fraction, numpy_rng(seed, "femnist_split", int(w)))
        for w, idx in group_by_owner(owners).items()
    ]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
