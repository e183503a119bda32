"""What the server receives in one round (``UpdateBatch``) and what a rule returns for it
(``Aggregate``): the records between the round driver, the privacy mechanism and the rules
(``fedcore.core.aggregators.base.Aggregator.aggregate``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedcore.core.models.layout import ParamLayout


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
