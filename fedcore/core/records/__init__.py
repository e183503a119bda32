"""The records shared across layers: local training (a client's schedule, context and update),
a client's message through the stage chain, what a stage sees of a round, and the round and run
records callbacks receive (a played round, a callback's verdict, the read-only run view, the
result).

A leaf at run time (no torch, no component): every layer names these types, and importing
them loads nothing heavy (the CLI imports the callback records at start-up). Its modules hold
the records that need torch: a client objective's plan and the records its hooks receive
(``plan``), what the server receives and a rule returns (``aggregate``), the per-client table
(``client_table``) and the client store (``store``). Each record is imported from its module
here only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import torch
    from torch import nn

    from fedcore.core.config import ExperimentConfig
    from fedcore.core.data.client_data import ClientData
    from fedcore.core.data.federated import FederatedData
    from fedcore.core.models import FedModel, ModelView
    from fedcore.core.models.layout import ParamLayout
    from fedcore.core.records.client_table import ClientTable
    from fedcore.core.records.store import ClientStore

# --- local training ---------------------------------------------------------------------------

FrozenParams: TypeAlias = "tuple[torch.Tensor, dict[str, torch.Tensor]]"  # flat params, buffers


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
    step_limit: int | None = None  # the most local steps it takes (partial work by a deadline)
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

    def vector(self, name: str) -> torch.Tensor:
        """The uplink vector ``name``: ``delta`` or one of the extras."""
        return self.delta if name == "delta" else self.extras[name]

    def set_vector(self, name: str, value: torch.Tensor) -> None:
        """Replace the uplink vector ``name`` (``delta`` or one of the extras)."""
        if name == "delta":
            self.delta = value
        else:
            self.extras[name] = value


# --- the stage chain -------------------------------------------------------------------------


@dataclass
class Message:
    """One client's uplink as it travels through the chain: its update, the named vectors as
    they go on the wire (in the client objective's uplink order), their bytes, and the stages
    that rejected it (in chain order; none: the server accepts it)."""

    update: ClientUpdate
    sent: dict[str, torch.Tensor]
    nbytes: int = 0
    rejected_by: list[str] = field(default_factory=list)
    judge: str = field(default="server", repr=False, compare=False)  # the stage now called

    @property
    def accepted(self) -> bool:
        """True unless a stage rejected this message (the AND of every stage's verdict)."""
        return not self.rejected_by

    @accepted.setter
    def accepted(self, verdict: bool) -> None:
        """``False`` rejects on behalf of the stage being called; ``True`` changes nothing (a
        stage cannot undo another's rejection)."""
        if not verdict:
            self.reject(self.judge)

    def reject(self, by: str) -> None:
        """Record that stage ``by`` rejects this message."""
        if by not in self.rejected_by:
            self.rejected_by.append(by)


@dataclass
class Closing:
    """The server's side of a closing round, handed to every stage's ``end_round`` in chain
    order once the rule's step is applied: the model, which a stage may move further (an extra
    server step), and the BatchNorm statistics the server will load (the kept clients'
    weighted mean), which a stage may replace, from ``client_buffers`` (the kept clients', in
    order) and their averaging ``weights`` (summing to one; None when no client sent any)."""

    params: torch.Tensor
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    client_buffers: list[dict[str, torch.Tensor]] = field(default_factory=list)
    weights: torch.Tensor | None = None


def no_start_point(
    client_id: int, planned_steps: Callable[[], int]
) -> torch.Tensor | None:
    """Every client starts at the global model."""
    return None


@dataclass(kw_only=True)
class StageContext:
    """What a stage and the per-client template see of one round: the run's settings, the
    round, its model and downlink, the client store and what the method sends and needs (no
    component). The driver's ``fedcore.core.engines.round_context.RoundContext`` extends it."""

    cfg: ExperimentConfig
    device: torch.device
    data: FederatedData
    model: nn.Module  # the working module clients load parameters into
    layout: ParamLayout
    store: ClientStore
    byzantine: frozenset[int]
    round: int
    params: torch.Tensor  # theta_t, flat
    buffers: dict[str, torch.Tensor]
    schedule: LocalSchedule
    uplink: tuple[str, ...] = ("delta",)  # the vectors each client sends, in order
    needs: frozenset[str] = frozenset()  # the client scalars the rule reads
    downlink: dict[str, torch.Tensor] = field(default_factory=dict)  # Aggregator.broadcast()
    # where client k's local SGD starts (None: at theta_t); the second argument computes, when
    # called, the number of local steps the client will take
    start_point: Callable[[int, Callable[[], int]], torch.Tensor | None] = no_start_point
    # the most local steps a client takes this round (a late client's partial work)
    step_limits: dict[int, int] = field(default_factory=dict)


# --- callbacks -------------------------------------------------------------------------------


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
