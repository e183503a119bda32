"""IDX files (MNIST's on-disk format): read, write, and repack the MNIST test digits."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

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


class DataFileError(ValueError):
    """A dataset file that is corrupt or inconsistent; the message names the file and the cause."""


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped in memory when it ends in ``.gz`` (nothing written to disk)."""
    raw = path.read_bytes()
    if path.suffix != ".gz":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataFileError(f"{path}: corrupt gzip file ({exc})") from None


def read_idx(path: Path, ndim: int | None = None) -> np.ndarray:
    """Read a (possibly gzipped) uint8 IDX file, checking its header against its size.

    ``ndim`` (1 for labels, 3 for images) is checked when given; any mismatch raises
    ``DataFileError`` naming the file and what is wrong.
    """
    raw = read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        magic = raw[:4].hex() or "empty file"
        raise DataFileError(f"{path}: not an IDX file (bad magic number {magic})")
    if raw[2] != 0x08:
        raise DataFileError(f"{path}: IDX element type 0x{raw[2]:02x}, expected 0x08 (uint8)")
    n = raw[3]
    if n == 0 or (ndim is not None and n != ndim):
        raise DataFileError(f"{path}: IDX file of {n} dimensions, expected {ndim or '>= 1'}")
    if len(raw) < 4 + 4 * n:
        raise DataFileError(f"{path}: truncated IDX header ({len(raw)} bytes)")
    dims = struct.unpack(f">{n}I", raw[4 : 4 + 4 * n])
    expected = 4 + 4 * n + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        raise DataFileError(
            f"{path}: IDX header says shape {tuple(dims)} ({expected} bytes), the file has "
            f"{len(raw)} bytes (truncated or padded)"
        )
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * n).reshape(dims)


def idx_path(folder: Path, stem: str) -> Path:
    """``folder/stem``, else ``folder/stem.gz`` (read as is, never extracted next to it)."""
    plain, gz = folder / stem, folder / f"{stem}.gz"
    return plain if plain.is_file() or not gz.is_file() else gz


def read_mnist_split(
    folder: Path, train: bool, num_classes: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N x 28 x 28) and labels (N) of MNIST's train or t10k files in ``folder``, checked:
    as many labels as images, 28 x 28 images, labels in 0..num_classes-1."""
    prefix = "train" if train else "t10k"
    images_path = idx_path(folder, f"{prefix}-images-idx3-ubyte")
    labels_path = idx_path(folder, f"{prefix}-labels-idx1-ubyte")
    images = read_idx(images_path, ndim=3)
    labels = read_idx(labels_path, ndim=1)
    if images.shape[1:] != (28, 28):
        raise DataFileError(f"{images_path}: images of {images.shape[1:]}, expected (28, 28)")
    if len(labels) != len(images):
        raise DataFileError(
            f"{labels_path}: {len(labels)} labels for the {len(images)} images of "
            f"{images_path.name}"
        )
    if len(labels) and labels.max() >= num_classes:
        raise DataFileError(
            f"{labels_path}: label {int(labels.max())} outside 0..{num_classes - 1}"
        )
    return images, labels


def write_mnist_like(
    raw: Path, x_tr: ArrayLike, y_tr: ArrayLike, x_te: ArrayLike, y_te: ArrayLike,
    gz: bool = False,
) -> None:
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
