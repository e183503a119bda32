"""Load image-classification datasets as normalised in-memory tensors.

``digits`` is embedded in scikit-learn and always available; MNIST, Fashion-MNIST and CIFAR go
through torchvision's own dataset classes and read their on-disk files (``download=True`` fetches
them when there is network access); ``femnist`` reads LEAF's JSON files (:mod:`fedcore.data.leaf`)
and ``tiny_imagenet`` the ``tiny-imagenet-200`` folder (:mod:`fedcore.data.tiny_imagenet`).
Missing or corrupt files raise :class:`DatasetUnavailableError` with a one-line hint saying where
to put which files.
"""

from __future__ import annotations

import functools
import gzip
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

DATASET_NAMES = (
    "digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "femnist", "tiny_imagenet"
)


@dataclass
class DatasetArrays:
    """A dataset as tensors: normalised float32 images (N x C x H x W) and int64 labels.

    Datasets with a natural owner of each sample (FEMNIST's writers) also carry int64 owner ids
    per sample (``owner_train``, and ``owner_test`` where the test samples have owners too) and
    the owners' names (``owner_names[id]``); the ``natural`` partition needs ``owner_train``.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    name: str
    owner_train: torch.Tensor | None = None
    owner_test: torch.Tensor | None = None
    owner_names: tuple[str, ...] = ()

    @property
    def in_shape(self) -> tuple[int, int, int]:
        """Shape of one image, (C, H, W)."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)


class DatasetUnavailableError(RuntimeError):
    """The dataset's files are missing, corrupt or could not be downloaded."""


class _Spec(NamedTuple):
    cls: type  # torchvision class (md5-checked where torchvision checks)
    unchecked: type  # the same without md5 checks (verify=False)
    num_classes: int
    mean: tuple[float, ...]  # standard per-channel normalisation constants
    std: tuple[float, ...]


TORCHVISION_NAMES = ("mnist", "fashion_mnist", "cifar10", "cifar100")


@functools.cache
def _torchvision_specs() -> dict[str, _Spec]:
    """The torchvision-backed datasets (torchvision is imported on first use only)."""
    from torchvision import datasets as tvd

    class _UncheckedCIFAR10(tvd.CIFAR10):
        """CIFAR-10 that only checks that its files exist, not their md5 checksums."""

        def _check_integrity(self) -> bool:
            folder = Path(self.root, self.base_folder)
            return all((folder / f).is_file() for f, _ in self.train_list + self.test_list)

        def _load_meta(self) -> None:  # torchvision md5-checks the meta file separately
            with open(Path(self.root, self.base_folder, self.meta["filename"]), "rb") as f:
                self.classes = pickle.load(f, encoding="latin1")[self.meta["key"]]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    class _UncheckedCIFAR100(_UncheckedCIFAR10, tvd.CIFAR100):
        """CIFAR-100 without md5 checks."""

    return {
        "mnist": _Spec(tvd.MNIST, tvd.MNIST, 10, (0.1307,), (0.3081,)),
        "fashion_mnist": _Spec(tvd.FashionMNIST, tvd.FashionMNIST, 10, (0.2860,), (0.3530,)),
        "cifar10": _Spec(
            tvd.CIFAR10, _UncheckedCIFAR10, 10,
            (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
        ),
        "cifar100": _Spec(
            tvd.CIFAR100, _UncheckedCIFAR100, 100,
            (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762),
        ),
    }


def load_dataset(
    name: str,
    root: str | Path = "data",
    download: bool = False,
    verify: bool = True,
    seed: int = 0,
    global_test_fraction: float = 0.2,
) -> DatasetArrays:
    """Load ``name`` (one of :data:`DATASET_NAMES`) as normalised tensors.

    ``seed`` and ``global_test_fraction`` only matter where there is no official test split
    (``digits``, FEMNIST's ``all_data`` files); ``verify=False`` skips torchvision's md5 checks
    (CIFAR), so repacked files load.
    """
    if name == "digits":
        return _load_digits(seed, global_test_fraction)
    if name == "femnist":
        from fedcore.data.leaf import load_femnist

        return load_femnist(root, seed, global_test_fraction)
    if name == "tiny_imagenet":
        from fedcore.data.tiny_imagenet import load_tiny_imagenet

        return load_tiny_imagenet(root, download)
    if name not in TORCHVISION_NAMES:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASET_NAMES)}")
    from torchvision import datasets as tvd

    spec = _torchvision_specs()[name]
    root = Path(root).expanduser().resolve()
    folder, files = _expected_files(spec.cls, root)
    ds_cls = spec.cls if verify else spec.unchecked
    try:
        if issubclass(spec.cls, tvd.MNIST):
            _gunzip_missing(folder, files)
        train = ds_cls(str(root), train=True, download=download)
        test = ds_cls(str(root), train=False, download=False)
    except Exception as e:  # URLError/OSError/RuntimeError, or parse errors of corrupt files
        raise DatasetUnavailableError(_why(name, folder, files, download, verify, e)) from e
    return DatasetArrays(
        _to_images(train.data, spec.mean, spec.std),
        _to_labels(train.targets),
        _to_images(test.data, spec.mean, spec.std),
        _to_labels(test.targets),
        spec.num_classes,
        name,
    )


def _load_digits(seed: int, global_test_fraction: float) -> DatasetArrays:
    """scikit-learn's 8x8 digits, split stratified and seeded into train and global test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < global_test_fraction < 1.0:
        raise ValueError(f"global_test_fraction must be in (0, 1), got {global_test_fraction}")
    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]  # N x 1 x 8 x 8 in [0, 1]
    y = bunch.target.astype(np.int64)
    state = int(np.random.SeedSequence([seed, 1234]).generate_state(1)[0])
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=global_test_fraction, stratify=y, random_state=state
    )
    mean, std = float(x_tr.mean()), float(x_tr.std())  # statistics of the train part only
    x_tr, x_te = ((torch.from_numpy(a) - mean) / std for a in (x_tr, x_te))
    return DatasetArrays(x_tr, torch.from_numpy(y_tr), x_te, torch.from_numpy(y_te), 10, "digits")


def _to_images(data: torch.Tensor | np.ndarray, mean: tuple, std: tuple) -> torch.Tensor:
    """uint8 N x H x W (MNIST) or N x H x W x C (CIFAR) -> normalised float32 N x C x H x W."""
    x = torch.as_tensor(data)
    return normalise_images(x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2), mean, std)


def normalise_images(x: torch.Tensor, mean: tuple, std: tuple) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 ``(x / 255 - mean) / std`` per channel, contiguous."""
    x = x.to(torch.float32).div_(255.0)
    m, s = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in (mean, std))
    return x.sub_(m).div_(s).contiguous()


def _to_labels(targets: torch.Tensor | list[int]) -> torch.Tensor:
    return torch.as_tensor(np.asarray(targets), dtype=torch.int64)


def _expected_files(cls: type, root: Path) -> tuple[Path, list[str]]:
    """The folder torchvision reads ``cls`` from, and the file names it needs there."""
    from torchvision import datasets as tvd

    if issubclass(cls, tvd.MNIST):
        return root / cls.__name__ / "raw", [Path(url).stem for url, _ in cls.resources]
    names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    return root / cls.base_folder, names


def _gunzip_missing(folder: Path, files: list[str]) -> None:
    """Extract ``X.gz`` to ``X`` where only the gzip is there (torchvision only does so on
    download)."""
    for f in files:
        gz, out = folder / f"{f}.gz", folder / f
        if gz.is_file() and not out.exists():
            tmp = out.with_name(out.name + ".part")
            with gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(out)


def _why(
    name: str, folder: Path, files: list[str], download: bool, verify: bool, err: Exception
) -> str:
    """One-line explanation of why ``name`` could not be loaded, with where to put which files."""
    from torchvision import datasets as tvd
    from torchvision.datasets.utils import check_integrity

    cls = _torchvision_specs()[name].cls
    gz = ", optionally .gz" if issubclass(cls, tvd.MNIST) else ""
    expected = f"expected {', '.join(files)}{gz}"
    if any(not (folder / f).is_file() for f in files):
        if download:
            return (
                f"dataset {name!r}: download failed (no network?); put the files in {folder} "
                f"({expected})"
            )
        return (
            f"dataset {name!r}: files not found in {folder} ({expected}); "
            "put them there or set dataset.download=true with network access"
        )
    if verify and issubclass(cls, tvd.CIFAR10):
        sums = dict(cls.train_list + cls.test_list) | {cls.meta["filename"]: cls.meta["md5"]}
        bad = [f for f in files if not check_integrity(str(folder / f), sums[f])]
        return (
            f"dataset {name!r}: md5 checksum failed for {', '.join(bad) or 'some files'} in "
            f"{folder}; put the original files there, or set dataset.verify=false to accept "
            "repacked files"
        )
    cause = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
    return f"dataset {name!r}: files in {folder} could not be read ({cause}); {expected}"
