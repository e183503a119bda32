"""The typed round context: what every phase of one round reads
(docs/explanation/round-protocol.md).

The simulation builds one per round; engines, stages and client hooks take it in
place of the simulation object, so they see exactly these fields and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from fedcore.clients.base import ClientAlgorithm, LocalSchedule
from fedcore.layout import ParamLayout
from fedcore.store import ClientStore

if TYPE_CHECKING:
    from fedcore.aggregators.base import Aggregator
    from fedcore.compression.base import Compressor
    from fedcore.config import ExperimentConfig
    from fedcore.data.federated import FederatedData


@dataclass
class RoundContext:
    """One round of one simulation: fixed components plus this round's model and downlink."""

    cfg: ExperimentConfig
    device: torch.device
    data: FederatedData
    model: nn.Module  # the working module clients load parameters into
    layout: ParamLayout
    store: ClientStore
    client_algo: ClientAlgorithm
    aggregator: Aggregator
    compressor: Compressor
    byzantine: frozenset[int]
    round: int
    params: torch.Tensor  # theta_t, flat
    buffers: dict[str, torch.Tensor]
    schedule: LocalSchedule
    downlink: dict[str, torch.Tensor] = field(default_factory=dict)  # Aggregator.broadcast()
    # where client k's local SGD starts, given the local steps it will take (None: at theta_t)
    start_point: Callable[[int, int | None], torch.Tensor | None] = lambda k, steps: None
    needs_num_steps: bool = False  # start_point needs the client's planned local steps
