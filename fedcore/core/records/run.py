"""The run records callbacks receive: the driver's state a view reads, the read-only run view,
a played round, a callback's verdict and the result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import torch

    from fedcore.core.config import ExperimentConfig
    from fedcore.core.data.federated import FederatedData
    from fedcore.core.models import FedModel
    from fedcore.core.records.client_table import ClientTable
    from fedcore.core.records.store import ClientStore


class RunState(Protocol):
    """What the driver exposes for ``RunView`` to read (the simulation has these)."""

    cfg: ExperimentConfig
    device: torch.device
    data: FederatedData
    model: FedModel
    round: int
    params: torch.Tensor
    buffers: dict[str, torch.Tensor]
    store: ClientStore
    byzantine: frozenset[int]
    history: list[dict[str, float]]
    client_tables: list[ClientTable]
    skipped_metrics: dict[str, str]
    engine_name: str
    engine_reason: str
    privacy_params: dict[str, str]
    held_out: np.ndarray

    def eval_params(self) -> torch.Tensor: ...

    def personal_params(
        self, client_id: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None: ...

    @property
    def personalized(self) -> bool: ...

    @property
    def projection_dim(self) -> int | None: ...


class RunView:
    """A callback's read-only view of the run: its config, device, data and working model,
    the round done, the global parameters and buffers, the client store, the histories and
    engine, and what evaluating needs (``eval_params``, personal models). Tensors are the
    run's own: read them, never write into them."""

    def __init__(self, state: RunState) -> None:
        self._state = state

    @property
    def cfg(self) -> ExperimentConfig:
        return self._state.cfg

    @property
    def device(self) -> torch.device:
        return self._state.device

    @property
    def data(self) -> FederatedData:
        return self._state.data

    @property
    def held_out(self) -> np.ndarray:
        """The sorted ids of the clients held out of training (``dataset.holdout_clients``)."""
        return self._state.held_out

    @property
    def model(self) -> FedModel:
        """The working module (a callback may load parameters into it to evaluate)."""
        return self._state.model

    @property
    def round(self) -> int:
        """Rounds done (after a resume, those the checkpoint held)."""
        return self._state.round

    @property
    def params(self) -> torch.Tensor:
        return self._state.params

    @property
    def buffers(self) -> Mapping[str, torch.Tensor]:
        return self._state.buffers

    @property
    def store(self) -> ClientStore:
        return self._state.store

    @property
    def byzantine(self) -> frozenset[int]:
        return self._state.byzantine

    @property
    def history(self) -> list[dict[str, float]]:
        return self._state.history

    @property
    def client_tables(self) -> list[ClientTable]:
        return self._state.client_tables

    @property
    def skipped_metrics(self) -> Mapping[str, str]:
        return self._state.skipped_metrics

    @property
    def engine_name(self) -> str:
        return self._state.engine_name

    @property
    def engine_reason(self) -> str:
        return self._state.engine_reason

    @property
    def privacy_params(self) -> Mapping[str, str]:
        """The privacy mechanism's resolved parameters (``dp.*``; empty: none)."""
        return self._state.privacy_params

    @property
    def personalized(self) -> bool:
        """Whether the client objective keeps personal models."""
        return self._state.personalized

    @property
    def projection_dim(self) -> int | None:
        return self._state.projection_dim

    def eval_params(self) -> torch.Tensor:
        """The parameters the rule evaluates (``Aggregator.eval_params`` of the global ones)."""
        return self._state.eval_params()

    def personal_params(
        self, client_id: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """A client's personal (flat params, buffers); None: none (yet)."""
        return self._state.personal_params(client_id)


@dataclass
class RoundRecord:
    """One played round as the callbacks see it, in the order they run.

    ``metrics`` holds the round's metrics so far: the loop merges each callback's returned
    metrics into it, so a callback sees those of the callbacks before it. ``clients`` is the
    round's per-client table once a callback produced one (evaluation rounds). ``run`` is the
    run's read-only view. ``stop`` is the reason an earlier callback paused the run and
    ``converged`` the reason one finished it (None: none did); a callback after it may act on
    it. ``checkpoint``: a callback asked the driver to write the round's checkpoint.
    """

    round: int
    metrics: dict[str, float]
    run: RunView
    sampled: np.ndarray  # the clients sampled this round (sorted ids)
    client_values: dict[str, np.ndarray] = field(default_factory=dict)  # the rule's, per client
    clients: ClientTable | None = None
    stop: str | None = None
    converged: str | None = None
    checkpoint: bool = False

    @property
    def last(self) -> bool:
        """Whether this is the run's last round."""
        return self.round == self.run.cfg.rounds


@dataclass(frozen=True)
class RoundVerdict:
    """What a callback returns from ``on_round_end`` (None means an empty verdict).

    Two kinds of stop: ``stop`` (True or a reason) pauses the run after this round: it is
    recorded and checkpointed, ends KILLED and the same command resumes it; ``finish`` (True or
    a reason) declares it converged: it ends FINISHED after this round with the reason recorded
    (``Result.converged``), and nothing resumes it. ``metrics``: added to the round's metrics
    (history, MLflow); ``clients``: the round's per-client table (the evaluation's);
    ``columns``: extra per-client columns for that table; ``checkpoint``: the driver writes
    the round's checkpoint once every callback has run.
    """

    stop: bool | str = False
    finish: bool | str = False
    metrics: Mapping[str, float] = field(default_factory=dict)
    clients: ClientTable | None = None
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)
    checkpoint: bool = False


@dataclass
class Result:
    """A run's outcome: its config, history, per-client tables and summary."""

    config: dict[str, Any]
    config_hash: str
    history: list[dict[str, float]] = field(default_factory=list)
    client_tables: list[ClientTable] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    skipped_metrics: dict[str, str] = field(default_factory=dict)  # pattern -> why not measured
    stopped: str | None = None  # why a callback paused the run (None: not paused)
    converged: str | None = None  # why a callback finished the run early (None: it did not)

    def rounds_frame(self) -> pd.DataFrame:
        """One row per round, one column per metric (pandas)."""
        from fedcore.core.records.frames import rounds_frame

        return rounds_frame(self.history)

    def clients_frame(self) -> pd.DataFrame:
        """One row per (evaluated round, client): accuracy, loss, samples, sampled (pandas)."""
        from fedcore.core.records.frames import clients_frame

        return clients_frame(self.client_tables)
