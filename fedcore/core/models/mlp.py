"""CRAFT's MLP 200-200 on flattened inputs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fedcore.core.models import FedModel


class MLP(FedModel):
    """flatten -> fc1(200) -> ReLU -> fc2(200) -> ReLU -> head."""

    def __init__(self, in_shape: tuple[int, int, int], num_classes: int, hidden: int = 200):
        super().__init__()
        self.embed_dim = hidden
        self.fc1 = nn.Linear(math.prod(in_shape), hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, num_classes)

    def preactivation(self, x: torch.Tensor) -> torch.Tensor:
        """Output of ``fc2`` (the input of the last ReLU); features == relu(preactivation)."""
        h: torch.Tensor = self.fc2(F.relu(self.fc1(x.flatten(1))))
        return h

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """ReLU of ``fc2``'s output, shape (B, 200)."""
        return F.relu(self.preactivation(x))
