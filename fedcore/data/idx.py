"""IDX files (MNIST's on-disk format): read, write, and repack the MNIST test digits."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> None:
    """Write a uint8 array as IDX: magic 0x0000 08 <ndim>, big-endian dims, then the data."""
    if arr.dtype != np.uint8 or arr.ndim not in (1, 3):
        raise ValueError("IDX writer takes uint8 arrays of 1 or 3 dimensions")
    data = struct.pack(">I", 0x0800 + arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data += arr.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


def read_idx(path: Path) -> np.ndarray:
    """Read a (possibly gzipped) uint8 IDX file."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def write_mnist_like(raw: Path, x_tr, y_tr, x_te, y_te, gz: bool = False) -> None:
    """Write train/test images and labels as the four files torchvision's MNIST reads."""
    for stem, arr in zip(MNIST_FILES, (x_tr, y_tr, x_te, y_te), strict=True):
        write_idx(raw / stem, np.asarray(arr, dtype=np.uint8), gz=gz)


def repack_mnist_t10k(src: Path, root: Path, n_train: int = 8000, seed: int = 0) -> Path:
    """Split the 10,000 MNIST test digits into train/test parts under ``root/MNIST/raw``."""
    images = read_idx(src / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(src / "t10k-labels-idx1-ubyte.gz")
    perm = np.random.default_rng(np.random.SeedSequence([seed, 1234])).permutation(len(labels))
    tr, te = perm[:n_train], perm[n_train:]
    write_mnist_like(root / "MNIST" / "raw", images[tr], labels[tr], images[te], labels[te])
    return root
