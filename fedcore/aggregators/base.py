"""The aggregator interface: a rule maps an UpdateBatch (m x d deltas) to the server step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedcore.layout import ParamLayout
from fedcore.registry import HParams, Registry

REGISTRY: Registry[Aggregator] = Registry("aggregator rule", "rule", "fedcore.aggregators")
register = REGISTRY.register


@dataclass
class UpdateBatch:
    """What the server receives in one round.

    ``deltas[k]`` is ``theta_k - theta`` of the k-th sampled client (sign convention of
    DESIGN.md §2); ``stats`` holds per-client extras (each a length-m tensor) that a rule
    asked for through ``Aggregator.needs``.
    """

    deltas: torch.Tensor
    num_samples: torch.Tensor
    layout: ParamLayout | None = None
    stats: dict[str, torch.Tensor] = field(default_factory=dict)
    client_ids: torch.Tensor | None = None
    round: int = 0

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


class Aggregator:
    """Base class. Subclasses define ``HParams`` and ``aggregate``; server state is attributes."""

    name: ClassVar[str]
    HParams: ClassVar[type[HParams]] = HParams
    needs: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, hparams: HParams | None = None) -> None:
        self.hp = hparams if hparams is not None else self.HParams()
        self.last_metrics: dict[str, float] = {}

    def aggregate(self, batch: UpdateBatch) -> torch.Tensor:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{self.name} keeps no state, got keys {sorted(state)}")


def weighted_mean(deltas: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k w_k delta_k for weights that sum to one."""
    return weights @ deltas
