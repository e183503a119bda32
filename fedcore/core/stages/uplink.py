"""The uplink stage: error feedback and the compressor on every uplink vector, and the bytes.

Every uplink vector goes to the error-feedback variant, which feeds back the compression
error of the one it corrects (``ErrorFeedback.corrects``) and applies C alone to the others.
A randomized compressor draws from a stream per (seed, round, client)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fedcore.core.component.seeding import derive_seed
from fedcore.core.compression.base import Compressor, side_bytes
from fedcore.core.records import Closing, Message
from fedcore.core.stages.base import Stage
from fedcore.core.stages.feedback.base import ErrorFeedback

if TYPE_CHECKING:
    from collections.abc import Callable

    from fedcore.core.records import StageContext


class Uplink(Stage):
    name = "uplink"
    side = "wire"

    def __init__(self, compressor: Compressor, feedback: ErrorFeedback) -> None:
        super().__init__()
        self.compressor, self.feedback = compressor, feedback

    def callbacks(self) -> list[Any]:
        """The error feedback's (the stage holds it; the run asks the compressor itself)."""
        return self.feedback.callbacks()

    def state_dict(self) -> dict[str, Any]:
        return self.feedback.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.feedback.load_state_dict(state)

    def begin_round(self, rc: StageContext, sampled: list[int]) -> dict[str, float]:
        self.feedback.begin_round(rc.round, rc.schedule)
        return self.feedback.probe(rc, sampled)

    def start_point(
        self, rc: StageContext, client_id: int, planned_steps: Callable[[], int]
    ) -> torch.Tensor | None:
        steps = planned_steps() if self.feedback.per_client_alpha else None
        return self.feedback.start_point(rc.params, rc.store[client_id], steps)

    def on_send(self, msg: Message, rc: StageContext) -> None:
        up = msg.update
        gen = None
        if self.compressor.randomized:
            gen = torch.Generator().manual_seed(
                derive_seed(rc.cfg.seed, "compress", rc.round, up.client_id)
            )
        state = rc.store[up.client_id]
        for name, vec in msg.sent.items():
            out, nbytes = self.feedback.compress_vector(name, self.compressor.apply, vec, state,
                                                        gen)
            msg.sent[name] = out
            msg.nbytes += nbytes
        msg.nbytes += side_bytes(up.buffers)  # n_k and BatchNorm statistics

    def end_round(
        self, rc: StageContext, sampled: list[int], closing: Closing
    ) -> dict[str, float]:
        return self.feedback.end_round(sampled, rc.store, closing)
