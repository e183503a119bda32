"""A loaded dataset as tensors, the error of one that is missing, and the image normalisation
every loader shares (a leaf: the loaders of ``fedcore.core.data.datasets``, LEAF's and Tiny
ImageNet's import it, not each other)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def normalise_images(
    x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 ``(x / 255 - mean) / std`` per channel, contiguous."""
    x = x.to(torch.float32).div_(255.0)
    m, s = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in (mean, std))
    return x.sub_(m).div_(s).contiguous()
