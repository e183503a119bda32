"""The aggregator interface: a rule maps an UpdateBatch (m x d deltas) to the server step.

Protocol per simulation: ``setup(num_clients, layout)`` once; then per round ``broadcast()``
(the downlink every sampled client sees, beyond theta) and ``aggregate(batch) -> Aggregate``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedcore.core.config.component import Component
from fedcore.core.config.registry import HParams as BaseHParams
from fedcore.core.config.registry import Registry
from fedcore.core.models.layout import ParamLayout

REGISTRY: Registry[Aggregator] = Registry(
    "aggregator rule", "rule", "fedcore.core.aggregators",
    "fedcore.core.aggregators.base:Aggregator"
)
register = REGISTRY.register


@dataclass
class UpdateBatch:
    """What the server receives in one round.

    ``deltas[k]`` is ``theta_k - theta`` of the k-th sampled client (sign convention:
    docs/explanation/architecture.md); ``stats`` holds per-client extras (each a length-m
    tensor) that a rule asked for through ``Aggregator.needs``; ``extras[name]`` is the m x d
    matrix of a named extra uplink vector (``ClientAlgorithm.uplink``), rows in the order of
    ``deltas``.
    """

    deltas: torch.Tensor
    num_samples: torch.Tensor
    # layout and client_ids may be left out: __post_init__ fills them (one group; 0..m-1)
    layout: ParamLayout = None  # type: ignore[assignment]
    stats: dict[str, torch.Tensor] = field(default_factory=dict)
    client_ids: torch.Tensor = None  # type: ignore[assignment]
    round: int = 0
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    num_steps: torch.Tensor | None = None  # K_k, the optimiser steps each client took

    def __post_init__(self) -> None:
        if self.deltas.dim() != 2:
            raise ValueError(
                f"deltas must be an m x d matrix, got shape {tuple(self.deltas.shape)}"
            )
        self.num_samples = torch.as_tensor(
            self.num_samples, dtype=self.deltas.dtype, device=self.deltas.device
        )
        if self.num_samples.shape != (self.deltas.shape[0],):
            raise ValueError("num_samples must have one entry per row of deltas")
        if self.client_ids is None:
            self.client_ids = torch.arange(self.deltas.shape[0])
        if self.layout is None:
            self.layout = ParamLayout((), ((0, self.deltas.shape[1]),), ("model",))

    @property
    def m(self) -> int:
        return self.deltas.shape[0]

    @property
    def weights(self) -> torch.Tensor:
        """p_k = n_k / sum_j n_j over the sampled clients."""
        return self.num_samples / self.num_samples.sum()


@dataclass
class Aggregate:
    """What a rule returns for one round: the server step s (theta <- theta + s), its round
    metrics, and per-client values (length-m tensors, rows as in the batch)."""

    step: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    client_values: dict[str, torch.Tensor] = field(default_factory=dict)


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

