"""CIFAR batch files read with a restricted unpickler, and checked for consistency.

The CIFAR format is pickle, and a plain ``pickle.load`` runs whatever a crafted file asks for.
:class:`CifarUnpickler` admits only what CIFAR files hold: dicts, lists, str/bytes, ints and
numpy arrays (with the few numpy functions that rebuild them); any other global is refused
before it is looked up, so nothing in the file runs. It is used whatever ``dataset.verify`` says.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.data.idx import DataFileError

# (module, name) of every global a CIFAR batch file may name: how numpy 1.x and 2.x pickle an
# array, and how Python 3 pickles bytes at protocol 2.
ALLOWED_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)
IMAGE_BYTES = 3 * 32 * 32  # one row of a batch: R, G, B planes of 32 x 32


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global outside :data:`ALLOWED_GLOBALS`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(
                f"refused global {module}.{name} (CIFAR files hold only dicts, lists, "
                "strings and numpy arrays)"
            )
        return super().find_class(module, name)


def load_cifar_pickle(path: Path) -> dict[str, Any]:
    """The dict pickled in ``path``, read with :class:`CifarUnpickler` (DataFileError if not)."""
    with open(path, "rb") as f:
        try:
            obj = CifarUnpickler(f, encoding="latin1").load()
        except Exception as exc:  # noqa: BLE001  (any parse failure: a corrupt or hostile file)
            raise DataFileError(
                f"{path}: not a CIFAR batch file ({type(exc).__name__}: {exc})"
            ) from None
    if not isinstance(obj, dict):
        raise DataFileError(f"{path}: not a CIFAR batch file (holds {type(obj).__name__})")
    return obj


def read_cifar_batches(paths: list[Path], num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N x 32 x 32 x 3 uint8) and labels (N int64) of CIFAR batch files, checked:
    uint8 rows of 3072 bytes, one label per row, labels in 0..num_classes-1."""
    images, labels = [], []
    for path in paths:
        entry = load_cifar_pickle(path)
        data = entry.get("data")
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or (
            data.shape[1] != IMAGE_BYTES
        ):
            got = (
                f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray)
                else type(data).__name__
            )
            raise DataFileError(
                f"{path}: 'data' must be a uint8 array of N x {IMAGE_BYTES} (got {got})"
            )
        key = "labels" if "labels" in entry else "fine_labels"
        try:
            y = np.asarray(entry.get(key), dtype=np.int64)
        except (TypeError, ValueError):
            raise DataFileError(f"{path}: {key!r} is not a list of integers") from None
        if y.ndim != 1 or len(y) != len(data):
            raise DataFileError(f"{path}: {y.size} {key} for {len(data)} images")
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise DataFileError(
                f"{path}: label {int(y.max() if y.max() >= num_classes else y.min())} outside "
                f"0..{num_classes - 1}"
            )
        images.append(data)
        labels.append(y)
    x = np.concatenate(images).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(x), np.concatenate(labels)
