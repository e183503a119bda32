"""CIFAR batch files read with a restricted unpickler, and checked for consistency.

The CIFAR format is pickle, and a plain ``pickle.load`` runs whatever a crafted file asks for.
``CifarUnpickler`` admits only what CIFAR files hold: dicts, lists, str/bytes, ints and
numpy arrays (with the few numpy functions that rebuild them); any other global is refused
before it is looked up, so nothing in the file runs. It is used whatever ``dataset.verify`` says.

Arrays are rebuilt only from the bytes stored in the file: numpy's own pickles create an empty
array and fill it from its stored bytes, so a declared shape with no bytes behind it (e.g.
``(300000, 3072)``: 0.9 GB of uninitialised memory) is refused, as are object, structured and
sub-array dtypes (numpy crashes on an object array whose state is short). A batch file holds at
most ``MAX_ROWS`` images (10,000; CIFAR-100's ``train`` 50,000), whole rows of 3,072 uint8,
one integer label per image in ``0..classes-1``; anything else is refused naming the file.
"""

from __future__ import annotations

import _codecs
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.core.data.idx import DataFileError

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
MAX_ROWS = {"train": 50_000}  # images per batch file (CIFAR-100's train); others: DEFAULT_ROWS
DEFAULT_ROWS = 10_000  # CIFAR-10's data_batch_1..5 and test_batch, CIFAR-100's test
SAFE_KINDS = "biuf"  # bool, signed, unsigned, float


def max_rows(path: Path) -> int:
    """The most images the CIFAR batch file ``path`` holds in the original format."""
    return MAX_ROWS.get(path.name, DEFAULT_ROWS)


def max_file_bytes(path: Path) -> int:
    """An upper bound on a genuine (or repacked) batch file's size: each image byte stored at
    most twice (protocol 2 stores bytes as latin-1 text), labels and a header."""
    return 2 * max_rows(path) * (IMAGE_BYTES + 16) + (1 << 20)


def _refuse(what: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(f"refused {what} (CIFAR files hold only dicts, lists, "
                                  "strings and numpy arrays of numbers rebuilt from their bytes)")


def _safe_dtype(dtype: Any) -> np.dtype[Any]:
    if (not isinstance(dtype, np.dtype) or dtype.kind not in SAFE_KINDS
            or dtype.fields is not None or dtype.subdtype is not None):
        raise _refuse(f"dtype {dtype!r}")
    return dtype


def _dtype(*args: Any) -> np.dtype[Any]:
    return _safe_dtype(np.dtype(*args))


class _NdarrayName:
    """What the global ``numpy.ndarray`` stands for in a file: an argument of
    ``_reconstruct`` only (calling it would allocate any declared shape, uninitialised)."""


_NDARRAY = _NdarrayName()


class _FilledArray(np.ndarray):
    """The empty array ``_reconstruct`` returns; its state must bring the bytes it declares."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _refuse("an array state")
        _safe_dtype(state[-3])
        if not isinstance(state[-1], bytes | bytearray):
            raise _refuse("an array state without its bytes")
        super().__setstate__(state)


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    if subtype is not _NDARRAY or tuple(shape) != (0,):
        raise _refuse(f"an array declared with shape {shape!r} and no bytes")
    return _FilledArray((0,), dtype=np.uint8)


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    if not isinstance(buf, bytes | bytearray | pickle.PickleBuffer):
        raise _refuse("an array without its bytes")
    return np.frombuffer(memoryview(buf), dtype=_safe_dtype(dtype)).reshape(shape, order=order)


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _refuse(f"_codecs.encode with {encoding!r}")
    return bytes(_codecs.encode(text, "latin1"))


SAFE_GLOBALS: dict[str, Any] = {
    "_reconstruct": _reconstruct, "_frombuffer": _frombuffer, "ndarray": _NDARRAY,
    "dtype": _dtype, "encode": _encode,
}


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global outside ``ALLOWED_GLOBALS``, and gives the
    allowed ones in checked form (arrays only from their stored bytes, numeric dtypes only)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(
                f"refused global {module}.{name} (CIFAR files hold only dicts, lists, "
                "strings and numpy arrays)"
            )
        return SAFE_GLOBALS[name]


def load_cifar_pickle(path: Path) -> dict[str, Any]:
    """The dict pickled in ``path``, read with ``CifarUnpickler`` (DataFileError if not)."""
    size = path.stat().st_size
    if size > max_file_bytes(path):
        raise DataFileError(f"{path}: {size:,} bytes, more than a CIFAR batch file of "
                            f"{max_rows(path):,} images can hold")
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
        if isinstance(data, np.ndarray):
            data = np.asarray(data)  # a plain array (not the unpickler's filled subclass)
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
        if len(data) > max_rows(path):
            raise DataFileError(f"{path}: {len(data):,} images; a CIFAR batch file holds at most "
                                f"{max_rows(path):,}")
        key = "labels" if "labels" in entry else "fine_labels"
        try:
            y = np.asarray(entry.get(key))
        except (TypeError, ValueError):
            raise DataFileError(f"{path}: {key!r} is not a list of integers") from None
        if y.size and y.dtype.kind not in "iu":
            raise DataFileError(f"{path}: {key!r} is not a list of integers (got {y.dtype})")
        y = y.astype(np.int64)
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
