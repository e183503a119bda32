"""The aggregator interface: a rule maps an UpdateBatch (m x d deltas) to the server step.

Protocol per simulation: ``setup(num_clients, layout)`` once; then per round ``broadcast()``
(the downlink every sampled client sees, beyond theta) and ``aggregate(batch) -> Aggregate``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.registry import Registry
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import Aggregate, UpdateBatch

REGISTRY: Registry[Aggregator] = Registry(
    "aggregator rule", "rule", "fedcore.core.aggregators",
    "fedcore.core.aggregators.base:Aggregator"
)
register = REGISTRY.register


class Aggregator(Component):
    """Base class. Subclasses define ``HParams`` and ``aggregate``; server state is attributes."""

    name: ClassVar[str]
    HParams: ClassVar[type[BaseHParams]] = BaseHParams
    hp: BaseHParams
    needs: ClassVar[frozenset[str]] = frozenset()
    # whether the step depends on the batch only through the weighted mean of its deltas (then
    # central DP may hand the rule one noised mean: privacy.mechanism=central)
    mean_of_deltas: ClassVar[bool] = False

    def __init__(self, hparams: BaseHParams | None = None) -> None:
        super().__init__(hparams)
        self.num_clients = 0
        self.layout: ParamLayout | None = None

    def setup(self, num_clients: int, layout: ParamLayout) -> None:
        """Called once before the first round: N and the parameter layout."""
        self.num_clients, self.layout = num_clients, layout

    def broadcast(self) -> dict[str, torch.Tensor]:
        """Named d-vectors sent down to every sampled client this round (besides theta)."""
        return {}

    def eval_params(self, params: torch.Tensor) -> torch.Tensor:
        """The parameters to evaluate after a round (the last iterate unless overridden)."""
        return params

    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        raise NotImplementedError

    def buffer(self) -> tuple[int, int] | None:
        """An asynchronous rule's (concurrency, buffer size): clients training at once, and the
        updates each step applies (``fedcore.core.system.buffered``); None: synchronous."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{self.name} keeps no state, got keys {sorted(state)}")


def weighted_mean(deltas: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k w_k delta_k for weights that sum to one."""
    return weights @ deltas

