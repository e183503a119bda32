"""CIFAR batches with verify=false (docs/explanation/reliability.md): a batch declaring a shape its
bytes do not back (the probe's (300000, 3072) through numpy's own ``_reconstruct``: 0.9 GB of
uninitialised images, accepted before), an object array, more images than the format holds, an
oversized file or float labels are refused naming the file, before anything large is built."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from fedcore.core.data.cifar import DEFAULT_ROWS, IMAGE_BYTES, max_file_bytes
from fedcore.core.data.datasets import DatasetUnavailableError, load_dataset
from tests.test_datasets import write_cifar10

_core = np._core if hasattr(np, "_core") else np.core  # numpy 2 / 1


class _Declared:
    """Pickles as numpy's ``_reconstruct(ndarray, shape, 'B')`` with no bytes behind it."""

    def __init__(self, shape):
        self.shape = shape

    def __reduce__(self):
        return (_core.multiarray._reconstruct, (np.ndarray, self.shape, b"B"))


class _Called:
    """Pickles as a direct call ``numpy.ndarray(shape, uint8)`` (uninitialised memory)."""

    def __reduce__(self):
        return (np.ndarray, ((300_000, IMAGE_BYTES), np.dtype("u1")))


def _batch(tmp_path: Path, name: str, obj: dict, protocol: int = 2) -> Path:
    write_cifar10(tmp_path, np.random.default_rng(0))
    path = tmp_path / "cifar-10-batches-py" / name
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return path


def _error(tmp_path: Path) -> str:
    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset("cifar10", root=tmp_path, verify=False)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


def test_declared_shape_without_bytes_is_refused(tmp_path):
    path = _batch(tmp_path, "data_batch_1",
                  {"data": _Declared((300_000, IMAGE_BYTES)), "labels": [0] * 300_000})
    msg = _error(tmp_path)
    assert str(path) in msg and "refused an array declared with shape (300000, 3072)" in msg


def test_direct_ndarray_call_is_refused(tmp_path):
    path = _batch(tmp_path, "data_batch_2", {"data": _Called(), "labels": [0] * 300_000})
    msg = _error(tmp_path)
    assert str(path) in msg and "not a CIFAR batch file" in msg


class _ShortObjects:
    """An object array whose state declares 10**6 elements and holds one: numpy's
    ``__setstate__`` crashes the process (segmentation fault) on it."""

    def __reduce__(self):
        return (_core.multiarray._reconstruct, (np.ndarray, (0,), b"b"),
                (1, (10**6,), np.dtype("O"), False, [0]))


@pytest.mark.parametrize("protocol", [2, 4])
def test_object_array_is_refused_without_crashing(tmp_path, protocol):
    path = _batch(tmp_path, "test_batch", {"data": _ShortObjects(), "labels": [0]}, protocol)
    msg = _error(tmp_path)
    assert str(path) in msg and "refused dtype dtype('O')" in msg


def test_more_images_than_a_batch_file_holds_are_refused(tmp_path):
    rows = np.zeros((DEFAULT_ROWS + 1, IMAGE_BYTES), dtype=np.uint8)
    path = _batch(tmp_path, "test_batch", {"data": rows, "labels": [0] * (DEFAULT_ROWS + 1)},
                  protocol=4)
    msg = _error(tmp_path)
    assert msg.endswith(f"{path}: 10,001 images; a CIFAR batch file holds at most 10,000")


def test_oversized_file_is_refused_before_it_is_read(tmp_path):
    write_cifar10(tmp_path, np.random.default_rng(0))
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    with open(path, "r+b") as f:
        f.truncate(max_file_bytes(path) + 1)  # sparse: no disk space used
    msg = _error(tmp_path)
    assert str(path) in msg and "more than a CIFAR batch file of 10,000 images can hold" in msg


def test_float_labels_are_refused(tmp_path):
    x = np.zeros((2, IMAGE_BYTES), dtype=np.uint8)
    path = _batch(tmp_path, "data_batch_4", {"data": x, "labels": [1.7, 2.2]})
    msg = _error(tmp_path)
    assert msg.endswith(f"{path}: 'labels' is not a list of integers (got float64)")


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_genuine_arrays_load_at_every_protocol(tmp_path, protocol):
    x, y, _, _ = write_cifar10(tmp_path, np.random.default_rng(0))
    folder = tmp_path / "cifar-10-batches-py"
    for i in range(1, 6):
        blob = pickle.loads((folder / f"data_batch_{i}").read_bytes())
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(blob, protocol=protocol))
    d = load_dataset("cifar10", root=tmp_path, verify=False)
    assert d.y_train.tolist() == y.tolist() and len(d.x_train) == len(x)
