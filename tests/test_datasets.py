"""Tests for fedcore.core.data.datasets: digits, and torchvision's loaders on files in their real
on-disk formats (IDX for MNIST-like, pickled batches for CIFAR). No network is used."""

from __future__ import annotations

import pickle
import socket
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from fedcore.core.data.datasets import (
    DATASET_NAMES,
    DatasetArrays,
    DatasetUnavailableError,
    load_dataset,
)
from fedcore.core.data.idx import read_idx, repack_mnist_t10k, write_mnist_like

MNIST_FILES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]
MNIST_STATS = {"mnist": (0.1307, 0.3081), "fashion_mnist": (0.2860, 0.3530)}


def _real_mnist_dir() -> Path | None:
    """../shared/data/mnist-t10k next to the repository root, else /work/shared/..."""
    for d in (
        Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k",
        Path("/work/shared/data/mnist-t10k"),
    ):
        if (d / "t10k-images-idx3-ubyte.gz").is_file() and (
            d / "t10k-labels-idx1-ubyte.gz"
        ).is_file():
            return d
    return None


# --------------------------------------------------------------------------- file writers


def random_mnist(rng: np.random.Generator, n_train: int = 30, n_test: int = 10):
    return (
        rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, n_train, dtype=np.uint8),
        rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, n_test, dtype=np.uint8),
    )


def _pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def write_cifar10(root: Path, rng: np.random.Generator, per_batch: int = 4, n_test: int = 6):
    """cifar-10-batches-py in the real layout: rows of 3072 uint8 (R, G, B planes), 'labels'."""
    folder = root / "cifar-10-batches-py"
    xs, ys = [], []
    for i in range(1, 6):
        x = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        y = rng.integers(0, 10, per_batch).tolist()
        _pickle(folder / f"data_batch_{i}", {"batch_label": f"b{i}", "data": x, "labels": y})
        xs.append(x)
        ys += y
    x_te = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    y_te = rng.integers(0, 10, n_test).tolist()
    _pickle(folder / "test_batch", {"batch_label": "test", "data": x_te, "labels": y_te})
    _pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    return np.concatenate(xs), np.array(ys), x_te, np.array(y_te)


def write_cifar100(root: Path, rng: np.random.Generator, n_train: int = 12, n_test: int = 5):
    """cifar-100-python in the real layout: 'fine_labels' and 'coarse_labels', meta file."""
    folder = root / "cifar-100-python"
    out = []
    for fname, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        y = rng.integers(0, 100, n).tolist()
        coarse = [v // 5 for v in y]
        _pickle(folder / fname, {"data": x, "fine_labels": y, "coarse_labels": coarse})
        out += [x, np.array(y)]
    _pickle(
        folder / "meta",
        {
            "fine_label_names": [f"f{i}" for i in range(100)],
            "coarse_label_names": [f"c{i}" for i in range(20)],
        },
    )
    return out


def unnormalise(x: torch.Tensor, mean, std) -> np.ndarray:
    """Invert the normalisation back to uint8 pixel values."""
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return torch.round((x * s + m) * 255).to(torch.int64).numpy()


@pytest.fixture
def no_network(monkeypatch):
    """Make any connection attempt (and DNS lookup) fail at once, as offline."""

    def refuse(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# --------------------------------------------------------------------------- digits


def test_digits_shapes_and_normalisation():
    d = load_dataset("digits")
    assert isinstance(d, DatasetArrays) and d.name == "digits" and d.num_classes == 10
    assert d.in_shape == (1, 8, 8)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert len(d.x_train) + len(d.x_test) == 1797
    assert len(d.x_test) == pytest.approx(0.2 * 1797, abs=1)
    assert len(d.x_train) == len(d.y_train) and len(d.x_test) == len(d.y_test)
    assert set(d.y_train.tolist()) == set(range(10)) == set(d.y_test.tolist())
    # normalised with the train statistics
    assert abs(d.x_train.mean().item()) < 1e-4 and abs(d.x_train.std().item() - 1) < 1e-2
    assert abs(d.x_test.mean().item()) < 0.1
    # stratified: every class's share in the test set is about the global 20 %
    counts = torch.bincount(d.y_test, minlength=10).float() / torch.bincount(
        torch.cat([d.y_train, d.y_test]), minlength=10
    )
    assert torch.all((counts - 0.2).abs() < 0.02)


def _digit_rows(d: DatasetArrays) -> tuple[Counter, Counter]:
    """Undo the (affine) normalisation to the original 0..16 values; one bytes key per image."""
    lo, hi = d.x_train.min(), d.x_train.max()  # the values 0 and 16 both occur in the train part
    rows = []
    for x in (d.x_train, d.x_test):
        v = torch.round((x - lo) / (hi - lo) * 16).to(torch.uint8).numpy()
        rows.append(Counter(img.tobytes() for img in v.reshape(len(v), -1)))
    return rows[0], rows[1]


def test_digits_split_is_seeded_and_a_partition():
    from sklearn.datasets import load_digits

    a, b = load_dataset("digits", seed=3), load_dataset("digits", seed=3)
    c = load_dataset("digits", seed=4)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.x_test, b.x_test)
    assert torch.equal(a.y_train, b.y_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_test, c.x_test)  # another seed, another split
    # train and test together are exactly the 1,797 images (as a multiset), none in both parts
    full = Counter(r.astype(np.uint8).tobytes() for r in load_digits().data)
    tr, te = _digit_rows(a)
    assert sum(tr.values()) + sum(te.values()) == 1797
    assert tr + te == full
    assert all(full[k] > 1 for k in tr.keys() & te.keys())  # only true duplicates may be shared


def test_digits_fraction_and_unknown_name():
    d = load_dataset("digits", global_test_fraction=0.5)
    assert abs(len(d.x_test) - 898) <= 1
    with pytest.raises(ValueError, match="global_test_fraction"):
        load_dataset("digits", global_test_fraction=1.0)
    with pytest.raises(ValueError) as e:
        load_dataset("svhn")
    for name in DATASET_NAMES:
        assert name in str(e.value)


# --------------------------------------------------------------------------- MNIST-like


@pytest.mark.parametrize(
    ("name", "folder"), [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")]
)
@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_mnist_like_round_trip(tmp_path, name, folder, gz):
    x_tr, y_tr, x_te, y_te = random_mnist(np.random.default_rng(0))
    write_mnist_like(tmp_path / folder / "raw", x_tr, y_tr, x_te, y_te, gz=gz)
    d = load_dataset(name, root=tmp_path)
    assert d.name == name and d.num_classes == 10 and d.in_shape == (1, 28, 28)
    assert d.x_train.shape == (30, 1, 28, 28) and d.x_test.shape == (10, 1, 28, 28)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert d.y_train.tolist() == y_tr.tolist() and d.y_test.tolist() == y_te.tolist()
    mean, std = MNIST_STATS[name]
    np.testing.assert_array_equal(unnormalise(d.x_train, (mean,), (std,))[:, 0], x_tr)
    np.testing.assert_array_equal(unnormalise(d.x_test, (mean,), (std,))[:, 0], x_te)


def test_real_mnist_digits(tmp_path):
    src = _real_mnist_dir()
    if src is None:
        pytest.skip("real MNIST t10k files not found in ../shared/data/mnist-t10k")
    images = read_idx(src / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(src / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10_000, 28, 28) and len(labels) == 10_000
    repack_mnist_t10k(src, tmp_path, n_train=8000, seed=0)
    perm = np.random.default_rng(np.random.SeedSequence([0, 1234])).permutation(10_000)
    te = perm[8000:]

    d = load_dataset("mnist", root=tmp_path)
    assert d.x_train.shape == (8000, 1, 28, 28) and d.x_test.shape == (2000, 1, 28, 28)
    expected = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    hist = torch.bincount(d.y_train, minlength=10) + torch.bincount(d.y_test, minlength=10)
    assert hist.tolist() == expected
    assert torch.equal(d.y_test, torch.from_numpy(labels[te].astype(np.int64)))
    # the real digits normalised with the standard MNIST constants: mean ~0, std ~1
    assert abs(d.x_train.mean().item()) < 0.05 and abs(d.x_train.std().item() - 1) < 0.05
    np.testing.assert_array_equal(unnormalise(d.x_test, (0.1307,), (0.3081,))[:, 0], images[te])


# --------------------------------------------------------------------------- CIFAR


def _check_cifar(d: DatasetArrays, x_tr, y_tr, x_te, y_te, mean, std, num_classes):
    assert d.in_shape == (3, 32, 32) and d.num_classes == num_classes
    assert d.x_train.shape == (len(x_tr), 3, 32, 32) and d.x_test.shape == (len(x_te), 3, 32, 32)
    assert d.y_train.dtype == torch.int64
    assert d.y_train.tolist() == list(y_tr) and d.y_test.tolist() == list(y_te)
    # rows are R, G, B planes of 32 x 32 (channel-first), so they reshape straight to C x H x W
    np.testing.assert_array_equal(unnormalise(d.x_train, mean, std), x_tr.reshape(-1, 3, 32, 32))
    np.testing.assert_array_equal(unnormalise(d.x_test, mean, std), x_te.reshape(-1, 3, 32, 32))


def test_cifar10_repacked_files(tmp_path):
    arrays = write_cifar10(tmp_path, np.random.default_rng(1))
    d = load_dataset("cifar10", root=tmp_path, verify=False)
    assert d.x_train.shape[0] == 20 and d.x_test.shape[0] == 6
    _check_cifar(d, *arrays, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), 10)

    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset("cifar10", root=tmp_path, verify=True)
    msg = str(e.value)
    assert "\n" not in msg and "checksum" in msg and "dataset.verify=false" in msg
    assert "data_batch_1" in msg and str(tmp_path / "cifar-10-batches-py") in msg


def test_cifar100_repacked_files(tmp_path):
    arrays = write_cifar100(tmp_path, np.random.default_rng(2))
    d = load_dataset("cifar100", root=tmp_path, verify=False)
    _check_cifar(d, *arrays, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), 100)

    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset("cifar100", root=tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "checksum" in msg and "dataset.verify=false" in msg


# --------------------------------------------------------------------------- missing files


@pytest.mark.parametrize(
    ("name", "folder", "files"),
    [
        ("mnist", "MNIST/raw", MNIST_FILES),
        ("fashion_mnist", "FashionMNIST/raw", MNIST_FILES),
        ("cifar10", "cifar-10-batches-py", ["data_batch_1", "data_batch_5", "test_batch"]),
        ("cifar100", "cifar-100-python", ["train", "test", "meta"]),
    ],
)
@pytest.mark.parametrize("verify", [True, False])
def test_missing_files(tmp_path, name, folder, files, verify):
    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset(name, root=tmp_path / "nowhere", verify=verify)
    msg = str(e.value)
    assert "\n" not in msg and "not found" in msg and "dataset.download=true" in msg
    assert str(tmp_path / "nowhere" / folder) in msg
    assert all(f in msg for f in files)


def test_missing_file_partial_mnist(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw, *random_mnist(np.random.default_rng(0)))
    (raw / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetUnavailableError, match="files not found in .*MNIST/raw"):
        load_dataset("mnist", root=tmp_path)


@pytest.mark.parametrize(
    ("name", "folder"),
    [("mnist", "MNIST/raw"), ("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python")],
)
def test_download_offline(tmp_path, no_network, name, folder):
    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset(name, root=tmp_path, download=True)
    msg = str(e.value)
    assert "\n" not in msg and "download failed" in msg and "no network" in msg
    assert str(tmp_path / folder) in msg


def test_corrupt_mnist_file(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw, *random_mnist(np.random.default_rng(0)))
    (raw / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x0d\x03garbage")  # float32 magic
    with pytest.raises(DatasetUnavailableError) as e:
        load_dataset("mnist", root=tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "train-images-idx3-ubyte" in msg and "element type 0x0d" in msg
