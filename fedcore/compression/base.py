"""The compressor interface: an operator C on the uplink, wrapped by optional error feedback.

A compression config is one operator (``compressor: topk``) plus its error-feedback variant
(``error_feedback: none|ef|saef|sapef|cser``, docs/methods/compression.md); it works with any
client objective because it only moves the point local training starts from and what is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from pydantic import Field

from fedcore.registry import HParams, Registry
from fedcore.requirements import Need

if TYPE_CHECKING:
    from fedcore.clients.base import LocalSchedule
    from fedcore.round_context import RoundContext
    from fedcore.store import ClientStore

REGISTRY: Registry[Compressor] = Registry(
    "compressor", "compressor", "fedcore.compression", "fedcore.compression.base:Compressor"
)
register = REGISTRY.register


class CompressionHParams(HParams):
    """Error-feedback hyper-parameters of every compressor (docs/methods/compression.md)."""

    # default= by keyword: type checkers then see the defaults (``Compressor`` calls HParams())
    error_feedback: Literal["none", "ef", "saef", "sapef", "cser"] = "none"
    alpha_r: float = Field(default=0.85, ge=0.0, le=1.0)
    alpha_schedule: Literal["constant", "theory"] = "constant"
    L: float = Field(default=1.0, gt=0.0)
    H: int = Field(default=5, ge=1)
    reset_frac: float = Field(default=0.1, gt=0.0, le=1.0)
    probe_alpha: float = Field(default=1.0, ge=0.0)


@dataclass
class RoundEnd:
    """What closing a round gives back: an extra server step (CSER's digest mean) or None,
    and the round's compression metrics."""

    step: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class Compressor:
    """An uplink operator ``apply`` plus the error-feedback bookkeeping the round loop calls.

    Loop protocol, once per round: ``begin_round``; ``probe`` (metrics at the round's start);
    per client ``start_point`` (before local training) and ``compress`` (after, on ``delta``;
    extra uplink vectors go through ``apply`` alone); then ``end_round``.
    """

    name: ClassVar[str]
    HParams: ClassVar[type[CompressionHParams]] = CompressionHParams
    hp: CompressionHParams
    randomized: ClassVar[bool] = False

    @classmethod
    def requirements(cls, hp: CompressionHParams) -> list[Need]:
        """What this compressor needs from the rest of the config (:mod:`fedcore.requirements`),
        checked at load by :func:`fedcore.configure.build_config`; none by default."""
        return []

    def __init__(self, hparams: CompressionHParams | None = None) -> None:
        from fedcore.compression.feedback import ErrorFeedback

        self.hp = hparams if hparams is not None else self.HParams()
        self.feedback = ErrorFeedback(self.hp)

    def apply(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        """C(x): (x as the server receives it, bytes put on the wire)."""
        raise NotImplementedError

    @property
    def moment_matched_bn(self) -> bool:
        """True: the server moment-matches BatchNorm variances (the error-feedback methods of
        docs/methods/sapef.md); False: running statistics are plain sample-weighted means."""
        return self.feedback.active

    def begin_round(self, round: int, schedule: LocalSchedule) -> None:
        self.feedback.begin_round(round, schedule)

    @property
    def needs_num_steps(self) -> bool:
        """True when ``start_point`` needs the client's number of local steps (SA-PEF's
        "theory" alpha schedule)."""
        return self.feedback.per_client_alpha

    def start_point(
        self, global_params: torch.Tensor, state: dict[str, Any], num_steps: int | None = None
    ) -> torch.Tensor | None:
        """Where local training starts (None: at the global model); ``num_steps`` is the
        number of local steps the client will take (when ``needs_num_steps``)."""
        return self.feedback.start_point(global_params, state, num_steps)

    def compress(
        self,
        delta: torch.Tensor,
        state: dict[str, Any],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, int]:
        """Return (the delta as received by the server, bytes put on the wire)."""
        return self.feedback.compress(self.apply, delta, state, generator)

    def probe(self, rc: RoundContext, sampled: list[int]) -> dict[str, float]:
        """Metrics measured at the round's start, before training (SA-PEF's mismatch probe)."""
        from fedcore.compression.mismatch import round_gradient_mismatch

        return round_gradient_mismatch(rc, sampled)

    def end_round(self, client_ids: list[int], store: ClientStore) -> RoundEnd:
        """Close the round for the sampled clients: an extra server step or None, and metrics."""
        return self.feedback.end_round(client_ids, store)


def side_bytes(buffers: dict[str, torch.Tensor]) -> int:
    """What a client sends besides its delta: n_k as an int32 and its BatchNorm running
    statistics (the floating buffers) in fp16, as SA-PEF's repo puts them on the wire."""
    return 4 + 2 * sum(b.numel() for b in buffers.values())


def sparse_bytes(k: int) -> int:
    """k (index int32, value fp32) pairs."""
    return 8 * k
