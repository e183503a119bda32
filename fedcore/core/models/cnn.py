"""The two-conv CNN of CRAFT's code (tum-pbs/CRAFT fed/nets.py), with padded convs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedcore.core.models import FedModel


class CNN(FedModel):
    """conv5x5(64)-pool-conv5x5(64)-pool-fc384-fc192-head; dropout 0.2/0.5 after fc1/fc2."""

    def __init__(self, in_shape: tuple[int, int, int], num_classes: int):
        super().__init__()
        self.embed_dim = 192
        self.conv1 = nn.Conv2d(in_shape[0], 64, 5, padding=2)
        self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
        self.pool = nn.MaxPool2d(2)
        with torch.no_grad():
            flat = self._conv(torch.zeros(1, *in_shape)).shape[1]
        self.fc1 = nn.Linear(flat, 384)
        self.dropout1 = nn.Dropout(0.2)
        self.fc2 = nn.Linear(384, 192)
        self.dropout2 = nn.Dropout(0.5)
        self.head = nn.Linear(192, num_classes)

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        """Both conv-ReLU-pool stages, flattened."""
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        return x.flatten(1)

    def preactivation(self, x: torch.Tensor) -> torch.Tensor:
        """Output of ``fc2`` before dropout2; features == relu(preactivation) in eval mode."""
        h: torch.Tensor = self.fc2(F.relu(self.dropout1(self.fc1(self._conv(x)))))
        return h

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """relu(dropout2(fc2(.))) as in CRAFT (dropout before the ReLU), shape (B, 192)."""
        return F.relu(self.dropout2(self.preactivation(x)))
