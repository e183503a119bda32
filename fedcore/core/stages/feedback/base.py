"""The error-feedback interface, its own registry axis (``error_feedback: NAME``).

A variant wraps the compressor's operator C: it may move the point a client's local training
starts from, turn the trained delta into what C compresses, keep per-client state in the client
store, measure metrics at the round's start and, when the round closes, add an extra server step
or average the BatchNorm statistics its own way.
Each variant's ``HParams`` lists exactly the knobs it reads (docs/methods/compression.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams, Registry
from fedcore.core.component.registry import HParams as AnyHParams

if TYPE_CHECKING:
    from fedcore.core.records import Closing, LocalSchedule, StageContext
    from fedcore.core.records.store import ClientStore

REGISTRY: Registry[ErrorFeedback] = Registry(
    "error feedback", "error_feedback", "fedcore.core.stages.feedback",
    "fedcore.core.stages.feedback.base:ErrorFeedback",
)
register = REGISTRY.register

Operator = Callable[[torch.Tensor, torch.Generator | None], tuple[torch.Tensor, int]]


class ErrorFeedback(Component):
    """No feedback: C is applied to the delta as it is; nothing is kept between rounds."""

    name: ClassVar[str]
    HParams: ClassVar[type[HParams]] = HParams
    hp: AnyHParams
    corrects: ClassVar[str] = "delta"  # the uplink vector whose compression error is fed back
    per_client_alpha: bool = False  # start_point needs the client's planned local steps

    def __init__(self, hparams: AnyHParams | None = None) -> None:
        super().__init__(hparams)
        self.round = 0

    def begin_round(self, round: int, schedule: LocalSchedule) -> None:
        self.round = round

    def probe(self, rc: StageContext, sampled: list[int]) -> dict[str, float]:
        """Metrics measured at the round's start, before training."""
        return {}

    def start_point(
        self, global_params: torch.Tensor, state: dict[str, Any], num_steps: int | None = None
    ) -> torch.Tensor | None:
        """Where the client's local training starts (None: at the global model)."""
        return None

    def compress(
        self,
        op: Operator,
        delta: torch.Tensor,
        state: dict[str, Any],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, int]:
        """(the delta as the server receives it, bytes on the wire)."""
        return op(delta, generator)

    def compress_vector(
        self,
        name: str,
        op: Operator,
        vector: torch.Tensor,
        state: dict[str, Any],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, int]:
        """The uplink vector ``name`` as the server receives it and its bytes: through
        ``compress`` when it is the one this variant ``corrects``, C alone otherwise."""
        if name == self.corrects:
            return self.compress(op, vector, state, generator)
        return op(vector, generator)

    def end_round(
        self, client_ids: list[int], store: ClientStore, closing: Closing
    ) -> dict[str, float]:
        """Close the round for the sampled clients once the rule's step is applied (a variant
        may move ``closing.params`` or replace ``closing.buffers``); returns metrics."""
        return {}
