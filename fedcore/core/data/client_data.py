"""One client's data as the data layer hands it to the round (a leaf record: the data
package produces it, client objectives and engines read it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ClientData:
    """One client's local train and test split, as tensors on the simulation device."""

    client_id: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])


def label_mix(y_train: list[torch.Tensor], num_classes: int) -> torch.Tensor:
    """Clients x classes: each client's training label distribution (rows sum to 1)."""
    rows = [torch.bincount(y.cpu(), minlength=num_classes).double() for y in y_train]
    mix = torch.stack(rows)
    return mix / mix.sum(dim=1, keepdim=True).clamp_min(1)
