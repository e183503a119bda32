"""FedOUI's SmallCNN: conv3x3(32)-pool-conv3x3(64)-pool-fc128-head, ReLU after each layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedcore.core.models import FedModel


class SmallCNN(FedModel):
    """The model of FedOUI's experiments (docs/methods/fedoui.md); padded 3x3 convs."""

    def __init__(self, in_shape: tuple[int, int, int], num_classes: int):
        super().__init__()
        self.embed_dim = 128
        self.conv1 = nn.Conv2d(in_shape[0], 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        with torch.no_grad():
            flat = self._conv(torch.zeros(1, *in_shape)).shape[1]
        self.fc1 = nn.Linear(flat, 128)
        self.head = nn.Linear(128, num_classes)

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        """Both conv-ReLU-pool stages, flattened."""
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        return x.flatten(1)

    def preactivation(self, x: torch.Tensor) -> torch.Tensor:
        """fc1(flatten(conv features)), the input of the last ReLU (FedOUI's H, d = 128)."""
        h: torch.Tensor = self.fc1(self._conv(x))
        return h

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """ReLU of ``fc1``'s output, shape (B, 128)."""
        return F.relu(self.preactivation(x))
