"""Load image-classification datasets as normalised in-memory tensors.

``digits`` ships with fedcore (``fedcore/core/data/digits.npz``, ``fedcore.core.data.digits``)
and is always available; MNIST, Fashion-MNIST and CIFAR go through torchvision's own dataset classes
and read their on-disk files (``download=True`` fetches them when there is network access);
``femnist`` reads LEAF's JSON files (``fedcore.core.data.leaf``) and ``tiny_imagenet`` the
``tiny-imagenet-200`` folder (``fedcore.core.data.tiny_imagenet``). ``synthetic_cifar10`` is
generated from the seed on the simulation device (``fedcore.core.data.synthetic``), for timing
runs at CIFAR-10's shapes. Missing or corrupt files raise ``DatasetUnavailableError`` with a
one-line hint saying where to put which files.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

import numpy as np
import torch

from fedcore.core.data.arrays import DatasetArrays as DatasetArrays
from fedcore.core.data.arrays import DatasetUnavailableError as DatasetUnavailableError
from fedcore.core.data.arrays import normalise_images as normalise_images
from fedcore.core.data.cifar import read_cifar_batches
from fedcore.core.data.idx import DataFileError, read_mnist_split
from fedcore.core.data.synthetic import SYNTHETIC, synthetic_arrays

if TYPE_CHECKING:
    from torchvision.datasets import CIFAR10, MNIST
    from typing_extensions import TypeIs

    TorchvisionClass: TypeAlias = type[MNIST] | type[CIFAR10]

DATASET_NAMES = (
    "digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "femnist", "tiny_imagenet",
    "synthetic_cifar10",
)


class _Spec(NamedTuple):
    cls: TorchvisionClass  # torchvision class: its file list, md5 sums and download
    num_classes: int
    mean: tuple[float, ...]  # standard per-channel normalisation constants
    std: tuple[float, ...]


TORCHVISION_NAMES = ("mnist", "fashion_mnist", "cifar10", "cifar100")


@functools.cache
def _torchvision_specs() -> dict[str, _Spec]:
    """The torchvision-backed datasets (torchvision is imported on first use only)."""
    from torchvision import datasets as tvd

    return {
        "mnist": _Spec(tvd.MNIST, 10, (0.1307,), (0.3081,)),
        "fashion_mnist": _Spec(tvd.FashionMNIST, 10, (0.2860,), (0.3530,)),
        "cifar10": _Spec(tvd.CIFAR10, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
        "cifar100": _Spec(tvd.CIFAR100, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    }


def _is_mnist(cls: TorchvisionClass) -> TypeIs[type[MNIST]]:
    from torchvision import datasets as tvd

    return issubclass(cls, tvd.MNIST)


def _is_cifar(cls: TorchvisionClass) -> TypeIs[type[CIFAR10]]:
    from torchvision import datasets as tvd

    return issubclass(cls, tvd.CIFAR10)


def load_dataset(
    name: str,
    root: str | Path = "data",
    download: bool = False,
    verify: bool = True,
    seed: int = 0,
    global_test_fraction: float = 0.2,
    device: torch.device | str = "cpu",
    synthetic_samples: int | None = None,
) -> DatasetArrays:
    """Load ``name`` (one of ``DATASET_NAMES``) as normalised tensors.

    ``seed`` and ``global_test_fraction`` only matter where there is no official test split
    (``digits``, FEMNIST's ``all_data`` files); ``verify=False`` skips the md5 checks of CIFAR's
    files, so repacked files load. Files are read by fedcore's own checked readers (IDX, and CIFAR
    pickles through a restricted unpickler); torchvision only downloads. A synthetic dataset is
    generated from ``seed`` with its images on ``device`` (``synthetic_samples`` train images,
    unset: the full size); every other dataset loads on the CPU.
    """
    if name in SYNTHETIC:
        return DatasetArrays(*synthetic_arrays(name, seed, device, synthetic_samples), name)
    if name == "digits":
        return _load_digits(seed, global_test_fraction)
    if name == "femnist":
        from fedcore.core.data.leaf import load_femnist

        return load_femnist(root, seed, global_test_fraction)
    if name == "tiny_imagenet":
        from fedcore.core.data.tiny_imagenet import load_tiny_imagenet

        return load_tiny_imagenet(root, download)
    if name not in TORCHVISION_NAMES:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASET_NAMES)}")
    spec = _torchvision_specs()[name]
    root = Path(root).expanduser().resolve()
    folder, files = _expected_files(spec.cls, root)
    try:
        if download:
            _download(spec.cls, root)
        if _missing(spec.cls, folder, files):
            raise FileNotFoundError(folder)
        if _is_mnist(spec.cls):
            (x_tr, y_tr), (x_te, y_te) = (read_mnist_split(folder, t, spec.num_classes)
                                          for t in (True, False))
        else:
            if verify and _bad_checksums(spec.cls, folder, files):
                raise ValueError("md5")
            (x_tr, y_tr), (x_te, y_te) = (
                read_cifar_batches([folder / f for f, _ in part], spec.num_classes)
                for part in (spec.cls.train_list, spec.cls.test_list)
            )
    except DataFileError as e:  # a corrupt or inconsistent file: named, with the cause
        raise DatasetUnavailableError(f"dataset {name!r}: {e}") from e
    except Exception as e:  # URLError/OSError/RuntimeError, missing files, failed checksums
        raise DatasetUnavailableError(_why(name, folder, files, download, verify, e)) from e
    return DatasetArrays(
        _to_images(torch.from_numpy(np.array(x_tr)), spec.mean, spec.std),
        _to_labels(np.array(y_tr)),
        _to_images(torch.from_numpy(np.array(x_te)), spec.mean, spec.std),
        _to_labels(np.array(y_te)),
        spec.num_classes,
        name,
    )


def _download(cls: TorchvisionClass, root: Path) -> None:
    """Fetch ``cls``'s files into ``root`` with torchvision's downloader (no-op when present)."""
    fetcher = object.__new__(cls)
    fetcher.root = str(root)
    fetcher.download()


def _missing(cls: TorchvisionClass, folder: Path, files: list[str]) -> list[str]:
    """The expected files that are not there (MNIST's may be there as ``.gz`` only)."""
    gz = _is_mnist(cls)
    return [
        f for f in files
        if not (folder / f).is_file() and not (gz and (folder / f"{f}.gz").is_file())
    ]


def _bad_checksums(cls: type[CIFAR10], folder: Path, files: list[str]) -> list[str]:
    """CIFAR files whose md5 differs from the original's."""
    sums = dict(cls.train_list + cls.test_list) | {cls.meta["filename"]: cls.meta["md5"]}
    from torchvision.datasets.utils import check_integrity

    return [f for f in files if not check_integrity(str(folder / f), sums[f])]


def check_files_present(name: str, root: str | Path = "data", download: bool = False) -> None:
    """Raise ``DatasetUnavailableError`` (the same one-line hint as ``load_dataset``)
    when ``name``'s files are not on disk and will not be downloaded; reads nothing.

    Sweeps and studies call it for every cell before Prefect starts.
    """
    if name == "digits" or name in SYNTHETIC or download:
        return
    root = Path(root).expanduser().resolve()
    if name == "femnist":
        from fedcore.core.data.leaf import femnist_files_present

        femnist_files_present(root)
        return
    if name == "tiny_imagenet":
        from fedcore.core.data.tiny_imagenet import tiny_imagenet_files_present

        tiny_imagenet_files_present(root)
        return
    cls = _torchvision_specs()[name].cls
    folder, files = _expected_files(cls, root)
    if _missing(cls, folder, files):
        raise DatasetUnavailableError(
            _why(name, folder, files, False, False, FileNotFoundError(folder))
        )


def _load_digits(seed: int, global_test_fraction: float) -> DatasetArrays:
    """The embedded 8x8 digits (``fedcore.core.data.digits``), split stratified and seeded into
    train and global test."""
    from fedcore.core.data.digits import digits_arrays, stratified_split

    images, labels = digits_arrays()
    x = (images.astype(np.float32) / 16.0)[:, None]  # N x 1 x 8 x 8 in [0, 1]
    y = labels.astype(np.int64)
    state = int(np.random.SeedSequence([seed, 1234]).generate_state(1)[0])
    train, test = stratified_split(y, global_test_fraction, state)
    x_tr, x_te, y_tr, y_te = x[train], x[test], y[train], y[test]
    mean, std = float(x_tr.mean()), float(x_tr.std())  # statistics of the train part only
    x_tr, x_te = ((torch.from_numpy(a) - mean) / std for a in (x_tr, x_te))
    return DatasetArrays(x_tr, torch.from_numpy(y_tr), x_te, torch.from_numpy(y_te), 10, "digits")


def _to_images(
    data: torch.Tensor | np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """uint8 N x H x W (MNIST) or N x H x W x C (CIFAR) -> normalised float32 N x C x H x W."""
    x = torch.as_tensor(data)
    return normalise_images(x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2), mean, std)


def _to_labels(targets: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(targets), dtype=torch.int64)


def _expected_files(cls: TorchvisionClass, root: Path) -> tuple[Path, list[str]]:
    """The folder torchvision reads ``cls`` from, and the file names it needs there."""
    if _is_mnist(cls):
        return root / cls.__name__ / "raw", [Path(url).stem for url, _ in cls.resources]
    names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    return root / cls.base_folder, names


def _why(
    name: str, folder: Path, files: list[str], download: bool, verify: bool, err: Exception
) -> str:
    """One-line explanation of why ``name`` could not be loaded, with where to put which files."""
    cls = _torchvision_specs()[name].cls
    gz = ", optionally .gz" if _is_mnist(cls) else ""
    expected = f"expected {', '.join(files)}{gz}"
    if _missing(cls, folder, files):
        if download:
            return (
                f"dataset {name!r}: download failed (no network?); put the files in {folder} "
                f"({expected})"
            )
        return (
            f"dataset {name!r}: files not found in {folder} ({expected}); "
            "put them there or set dataset.download=true with network access"
        )
    if verify and _is_cifar(cls):
        bad = _bad_checksums(cls, folder, files)
        return (
            f"dataset {name!r}: md5 checksum failed for {', '.join(bad) or 'some files'} in "
            f"{folder}; put the original files there, or set dataset.verify=false to accept "
            "repacked files"
        )
    cause = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
    return f"dataset {name!r}: files in {folder} could not be read ({cause}); {expected}"
