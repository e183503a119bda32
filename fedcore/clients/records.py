"""The records of local training: a client's data, schedule, round context and update.

A leaf module (no component imports), so every layer can name these types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedcore.data.client_data import ClientData as ClientData

if TYPE_CHECKING:
    from fedcore.layout import ParamLayout
    from fedcore.models import ModelView

FrozenParams = tuple[torch.Tensor, dict[str, torch.Tensor]]  # flat params, buffers


@dataclass(frozen=True)
class LocalSchedule:
    """How long and how fast a client trains in one round (the ``local`` config block)."""

    epochs: int = 1
    steps: int | None = None
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class LocalContext:
    """Everything a client sees in one round."""

    model: nn.Module
    global_params: torch.Tensor
    global_buffers: dict[str, torch.Tensor]
    layout: ParamLayout
    data: ClientData
    schedule: LocalSchedule
    state: dict[str, Any]
    generator: torch.Generator
    round: int
    needs: frozenset[str] = frozenset()
    start_params: torch.Tensor | None = None  # where SGD starts (step-ahead EF); None: global
    server_payload: Mapping[str, torch.Tensor] = field(default_factory=dict)  # the downlink
    seed: int = 0  # the experiment seed (seeds of probes an objective or rule draws)
    # The plan's frozen models while the client trains, set by the engine: gradient-free models
    # in eval mode with the model API (``model(x)``, ``embedding``, ``head``).
    frozen: Mapping[str, ModelView] = field(default_factory=dict)

    def global_tensors(self) -> list[torch.Tensor]:
        """The global parameters as views shaped like ``model.parameters()``, in order."""
        return [self.global_params[s.start : s.stop].view(s.shape) for s in self.layout.slots]


@dataclass(frozen=True)
class BatchMask:
    """Which rows of a padded batch are real (the vectorised engine pads clients to one shape).

    ``rows``: 1 for a real sample; ``tuplets``: 1 for a real tuplet (plans with an arity). The
    sequential engine passes no mask: every row is real.
    """

    rows: torch.Tensor
    tuplets: torch.Tensor | None = None


@dataclass
class ClientUpdate:
    """What a client sends back (before compression)."""

    client_id: int
    delta: torch.Tensor
    num_samples: int
    num_steps: int
    train_loss: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # extra uplink d-vectors
    pending: dict[str, torch.Tensor] = field(default_factory=dict)  # state to commit, not sent
