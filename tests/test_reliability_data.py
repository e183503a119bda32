"""Corrupt, inconsistent and hostile dataset files: one-line errors naming the file and the
cause, no partial files left behind, and no code run from a crafted CIFAR pickle."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedcore.core.data.cifar import load_cifar_pickle
from fedcore.core.data.datasets import DatasetUnavailableError, load_dataset
from fedcore.core.data.idx import DataFileError, write_mnist_like
from tests.test_datasets import random_mnist, write_cifar10


def _mnist(tmp_path: Path, gz: bool = False) -> Path:
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw, *random_mnist(np.random.default_rng(0), n_train=40), gz=gz)
    return raw


def _error(tmp_path: Path, name: str = "mnist", **kw) -> str:
    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset(name, root=tmp_path, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_fewer_labels_than_images_is_refused(tmp_path):
    raw = _mnist(tmp_path)
    labels = np.zeros(5, dtype=np.uint8)  # 5 labels for 40 images
    write_mnist_like(raw, *random_mnist(np.random.default_rng(0), n_train=40)[:1], labels,
                     *random_mnist(np.random.default_rng(0))[2:])
    msg = _error(tmp_path)
    assert "train-labels-idx1-ubyte" in msg and "5 labels for the 40 images" in msg


def test_label_out_of_range_is_refused(tmp_path):
    raw = _mnist(tmp_path)
    x, y, xt, yt = random_mnist(np.random.default_rng(0), n_train=40)
    y[3] = 200
    write_mnist_like(raw, x, y, xt, yt)
    assert "label 200 outside 0..9" in _error(tmp_path)


def test_truncated_idx_is_refused(tmp_path):
    raw = _mnist(tmp_path)
    path = raw / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-7])
    msg = _error(tmp_path)
    assert str(path) in msg and "truncated or padded" in msg


def test_corrupt_gzip_is_reported_as_corrupt_and_leaves_no_partial_file(tmp_path):
    raw = _mnist(tmp_path, gz=True)
    path = raw / "train-images-idx3-ubyte.gz"
    blob = path.read_bytes()
    path.write_bytes(blob[:20] + bytes(b ^ 0xFF for b in blob[20:60]) + blob[60:])
    before = sorted(os.listdir(raw))
    msg = _error(tmp_path)
    assert str(path) in msg and "corrupt gzip" in msg and "not found" not in msg
    assert sorted(os.listdir(raw)) == before  # no .part, nothing extracted


def test_gzip_only_files_load_without_writing_next_to_them(tmp_path):
    raw = _mnist(tmp_path, gz=True)
    before = sorted(os.listdir(raw))
    d = load_dataset("mnist", root=tmp_path)
    assert len(d.y_train) == 40 and sorted(os.listdir(raw)) == before


def test_random_bytes_name_the_file_and_the_cause(tmp_path):
    raw = _mnist(tmp_path)
    path = raw / "train-labels-idx1-ubyte"
    path.write_bytes(np.random.default_rng(1).bytes(333))
    msg = _error(tmp_path)
    assert str(path) in msg and ("magic number" in msg or "element type" in msg)


class _Payload:
    """Unpickling this runs ``os.system(command)`` with a plain pickle.load."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("verify", [False, True])
def test_crafted_cifar_pickle_is_refused_and_runs_nothing(tmp_path, verify):
    write_cifar10(tmp_path, np.random.default_rng(0))
    marker = tmp_path / "pwned"
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    with open(batch, "wb") as f:
        pickle.dump({"data": _Payload(f"touch {marker}"), "labels": [0]}, f)
    msg = _error(tmp_path, "cifar10", verify=verify)
    assert not marker.exists()
    if not verify:  # with verify=True the md5 check refuses the file before it is read
        assert str(batch) in msg and "refused global" in msg and "system" in msg
    with pytest.raises(DataFileError, match="refused global"):
        load_cifar_pickle(batch)
    assert not marker.exists()


def test_cifar_label_count_mismatch_is_refused(tmp_path):
    write_cifar10(tmp_path, np.random.default_rng(0))
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    x = np.zeros((6, 3072), dtype=np.uint8)
    with open(batch, "wb") as f:
        pickle.dump({"data": x, "labels": [1, 2]}, f)
    msg = _error(tmp_path, "cifar10", verify=False)
    assert str(batch) in msg and "2 labels for 6 images" in msg


def test_cifar_files_written_by_numpy_load(tmp_path):
    x, y, _, _ = write_cifar10(tmp_path, np.random.default_rng(0))
    d = load_dataset("cifar10", root=tmp_path, verify=False)
    assert d.y_train.tolist() == y.tolist() and d.in_shape == (3, 32, 32)
