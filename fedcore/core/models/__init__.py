"""Models: MLP, CNN, FedOUI's SmallCNN, CIFAR-style ResNets."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

MODEL_NAMES = ("mlp", "cnn", "smallcnn", "resnet20", "resnet56", "resnet110")
NORMS = ("batch", "group")


class ModelView(Protocol):
    """The model API an objective's ``loss`` calls: a FedModel, or the vectorised engine's
    functional view of one (``fedcore.core.engines.functional.FunctionalModel``)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...

    def embedding(self, x: torch.Tensor) -> torch.Tensor: ...

    def head(self, h: torch.Tensor) -> torch.Tensor: ...


class FedModel(nn.Module):
    """Base model: ``forward(x) = head(features(x))`` with ``features`` of width ``embed_dim``."""

    embed_dim: int
    head: nn.Linear

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate embedding (after the last activation), shape (B, embed_dim)."""
        raise NotImplementedError

    def preactivation(self, x: torch.Tensor) -> torch.Tensor:
        """Input of the last ReLU before the classifier, shape (B, embed_dim)."""
        raise NotImplementedError

    def oui_units(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs of the last ReLU before the classifier, one column per unit (FedOUI's OUI,
        docs/methods/fedoui.md); the same as ``preactivation`` unless a model overrides it."""
        return self.preactivation(x)

    def add_projection_head(self, out_dim: int) -> None:
        """MOON's 2-layer MLP projection (embed_dim -> embed_dim -> out_dim) before the classifier.

        As in MOON's ``ModelFedCon``, the classifier then reads the projection: ``head`` is
        rebuilt with input width ``out_dim``. Its parameters are part of theta like any other.
        """
        self.projection = nn.Sequential(
            nn.Linear(self.embed_dim, self.embed_dim), nn.ReLU(), nn.Linear(self.embed_dim, out_dim)
        )
        self.head = nn.Linear(out_dim, self.head.out_features)

    def embedding(self, x: torch.Tensor) -> torch.Tensor:
        """The classifier's input: ``features(x)``, or its projection when the model has one."""
        h = self.features(x)
        projection = self._modules.get("projection")
        return h if projection is None else projection(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits, shape (B, num_classes)."""
        logits: torch.Tensor = self.head(self.embedding(x))
        return logits


# Imported after FedModel is defined: the submodules subclass it.
from fedcore.core.models.cnn import CNN  # noqa: E402
from fedcore.core.models.mlp import MLP  # noqa: E402
from fedcore.core.models.resnet import ResNet  # noqa: E402
from fedcore.core.models.smallcnn import SmallCNN  # noqa: E402

_RESNET_DEPTHS = {"resnet20": 3, "resnet56": 9, "resnet110": 18}


def build_model(
    name: str, in_shape: tuple[int, int, int], num_classes: int, norm: str = "batch"
) -> FedModel:
    """Build model ``name`` for inputs of shape (C, H, W); ``norm`` applies to ResNets only."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODEL_NAMES)}")
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; allowed: {', '.join(NORMS)}")
    if len(in_shape) != 3:
        raise ValueError(f"in_shape must be (C, H, W), got {tuple(in_shape)}")
    shape = (int(in_shape[0]), int(in_shape[1]), int(in_shape[2]))
    if name == "mlp":
        return MLP(shape, num_classes)
    if name == "cnn":
        return CNN(shape, num_classes)
    if name == "smallcnn":
        return SmallCNN(shape, num_classes)
    return ResNet(_RESNET_DEPTHS[name], shape, num_classes, norm)


__all__ = [
    "CNN", "MLP", "MODEL_NAMES", "NORMS", "FedModel", "ModelView", "ResNet", "SmallCNN",
    "build_model",
]
