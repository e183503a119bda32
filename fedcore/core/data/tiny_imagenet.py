"""Tiny-ImageNet from the standard ``tiny-imagenet-200`` folder (cs231n's zip, unpacked).

Layout under ``<root>/tiny-imagenet-200/``: ``wnids.txt`` (one WordNet id per line; its order is
the class order, 200 ids in the real set), ``train/<wnid>/images/*.JPEG`` (500 per class) and
``val/images/*.JPEG`` with ``val/val_annotations.txt`` (file name, wnid, box per line). The
labelled val split is the global test set (the real ``test/`` folder has no labels and is not
read). JPEGs are decoded by ``torchvision.io.decode_image`` (greyscale ones as RGB; where a
torchvision release no longer has it, by torchvision's PIL loader, about 5x slower) into
3 x 64 x 64 images, normalised per channel like CIFAR, with the usual Tiny-ImageNet train
statistics. Nothing is cached; ``download=True`` fetches the zip into ``<root>`` and unpacks it
there.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torchvision.datasets.folder import pil_loader
from torchvision.datasets.utils import download_and_extract_archive

from fedcore.core.data.arrays import DatasetArrays, DatasetUnavailableError, normalise_images

TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
MEAN = (0.4802, 0.4481, 0.3975)
STD = (0.2770, 0.2691, 0.2821)
_SIZE = (3, 64, 64)
_REQUIRED = ("wnids.txt", "train", "val/images", "val/val_annotations.txt")
_EXPECTED = (
    "expected wnids.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG, val/val_annotations.txt"
)


def tiny_imagenet_files_present(root: Path) -> None:
    """DatasetUnavailableError unless ``<root>/tiny-imagenet-200`` has its required entries."""
    folder = root / "tiny-imagenet-200"
    missing = [f for f in _REQUIRED if not (folder / f).exists()]
    if missing:
        raise DatasetUnavailableError(
            f"dataset 'tiny_imagenet': files not found in {folder} (missing {', '.join(missing)}; "
            f"{_EXPECTED}); unzip {TINY_URL} in {root} or set dataset.download=true with network "
            "access"
        )


def load_tiny_imagenet(root: str | Path, download: bool = False) -> DatasetArrays:
    """Tiny-ImageNet train (all classes of ``wnids.txt``) and val (global test) as tensors."""
    root = Path(root).expanduser().resolve()
    folder = root / "tiny-imagenet-200"
    if download and not all((folder / f).exists() for f in _REQUIRED):
        try:
            download_and_extract_archive(TINY_URL, str(root), md5=TINY_MD5)
        except Exception as e:  # URLError/OSError offline, or a bad zip
            raise DatasetUnavailableError(
                f"dataset 'tiny_imagenet': download failed (no network?); unzip {TINY_URL} in "
                f"{root} so that {folder} exists ({_EXPECTED})"
            ) from e
    tiny_imagenet_files_present(root)
    try:
        wnids = _read_wnids(folder / "wnids.txt")
        train, y_train = _train_files(folder / "train", wnids)
        val, y_val = _val_files(folder / "val", wnids)
        x_train, x_val = _decode(train), _decode(val)
    except (OSError, RuntimeError, ValueError) as e:
        cause = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        raise DatasetUnavailableError(
            f"dataset 'tiny_imagenet': files in {folder} could not be read ({cause}); {_EXPECTED}"
        ) from e
    return DatasetArrays(
        normalise_images(x_train, MEAN, STD),
        torch.tensor(y_train, dtype=torch.int64),
        normalise_images(x_val, MEAN, STD),
        torch.tensor(y_val, dtype=torch.int64),
        len(wnids),
        "tiny_imagenet",
    )


def _read_wnids(path: Path) -> list[str]:
    wnids = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not wnids or len(set(wnids)) != len(wnids):
        raise ValueError(f"{path.name}: expected distinct WordNet ids, one per line")
    return wnids


def _train_files(folder: Path, wnids: list[str]) -> tuple[list[Path], list[int]]:
    """train/<wnid>/images/*.JPEG in wnids.txt order, file names sorted within a class."""
    files: list[Path] = []
    labels: list[int] = []
    for label, wnid in enumerate(wnids):
        found = sorted((folder / wnid / "images").glob("*.JPEG"))
        if not found:
            raise ValueError(f"no train/{wnid}/images/*.JPEG")
        files += found
        labels += [label] * len(found)
    return files, labels


def _val_files(folder: Path, wnids: list[str]) -> tuple[list[Path], list[int]]:
    """val/images/<file> with labels from val_annotations.txt, in the annotation file's order."""
    index = {w: i for i, w in enumerate(wnids)}
    files: list[Path] = []
    labels: list[int] = []
    for n, line in enumerate((folder / "val_annotations.txt").read_text().splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise ValueError(f"val_annotations.txt line {n}: expected 'file<TAB>wnid' of wnids.txt")
        files.append(folder / "images" / fields[0])
        labels.append(index[fields[1]])
    if not files:
        raise ValueError("val_annotations.txt lists no images")
    return files, labels


def read_rgb_pil(path: Path) -> torch.Tensor:
    """uint8 3 x H x W through torchvision's PIL loader (what ImageFolder uses)."""
    return torch.from_numpy(np.array(pil_loader(str(path)))).permute(2, 0, 1)


def read_rgb_torchvision(path: Path) -> torch.Tensor:
    """uint8 3 x H x W through ``torchvision.io.decode_image`` (libjpeg), greyscale as RGB."""
    from torchvision.io import ImageReadMode, decode_image

    image: torch.Tensor = decode_image(str(path), mode=ImageReadMode.RGB)
    return image


def _default_reader() -> Callable[[Path], torch.Tensor]:
    try:
        from torchvision.io import ImageReadMode, decode_image  # noqa: F401
    except ImportError:
        return read_rgb_pil
    return read_rgb_torchvision


read_rgb = _default_reader()


def _decode(files: list[Path]) -> torch.Tensor:
    """uint8 N x 3 x 64 x 64 from JPEG files (greyscale decoded as RGB)."""
    out = torch.empty((len(files), *_SIZE), dtype=torch.uint8)
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its decoders (for TorchCodec)
        warnings.simplefilter("ignore", DeprecationWarning)
        for i, path in enumerate(files):
            img = read_rgb(path)
            if tuple(img.shape) != _SIZE:
                raise ValueError(f"{path.name} is {tuple(img.shape)}, expected {_SIZE}")
            out[i] = img
    return out
