"""The records shared across layers: local training (a client's schedule, context and update),
a client's message through the stage chain and what a stage sees of a round, here; the round and
run records callbacks receive (a played round, a callback's verdict, the read-only run view, the
result) in ``run``.

A leaf at run time (no torch, no component): every layer names these types, and importing
them loads nothing heavy (the CLI imports the callback records at start-up). Its other modules
hold the records that need torch: a client objective's plan and the records its hooks receive
(``plan``), what the server receives and a rule returns (``aggregate``), the per-client table
(``client_table``) and the client store (``store``). Each record is imported from its module
only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fedcore.core.config import ExperimentConfig
    from fedcore.core.data.client_data import ClientData
    from fedcore.core.data.federated import FederatedData
    from fedcore.core.models import ModelView
    from fedcore.core.models.layout import ParamLayout
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
