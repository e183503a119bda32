"""The client interface: a client objective describes its local work as a plan.

``ClientAlgorithm.plan(ctx)`` returns the round's [`LocalPlan`][fedcore.core.records.plan.LocalPlan]
(batches, loss, tuplet size, frozen models, gradient shift, proximal term, follow-up pass);
``finish`` completes the update after training; ``commit`` updates client state once the
server has judged it. The template both engines share is ``fedcore.core.clients.template``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
from torch import nn

from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.registry import Registry
from fedcore.core.records import (
    BatchMask,
    LocalContext,
    LocalSchedule,
)
from fedcore.core.records.plan import Batch, Commit, Finished, LocalPlan

if TYPE_CHECKING:
    from fedcore.core.callbacks import Callback
    from fedcore.core.models import FedModel

REGISTRY: Registry[ClientAlgorithm] = Registry(
    "client algorithm", "algorithm", "fedcore.core.clients",
    "fedcore.core.clients.base:ClientAlgorithm"
)
register = REGISTRY.register

__all__ = ["REGISTRY", "ClientAlgorithm", "batch_mean", "cross_entropy", "minibatches",
           "plain_cross_entropy", "register"]

LossFn = TypeVar("LossFn", bound=Callable[..., torch.Tensor])


def plain_cross_entropy(loss: LossFn) -> LossFn:
    """Mark ``loss`` as ``cross_entropy(b.model(b.x), b.y, b.mask)`` and nothing more: the
    sequential engine may then take the MLP's written-out step for it
    (``fedcore.core.models.mlp_step``). An override of a marked loss is unmarked."""
    loss.plain_cross_entropy = True  # type: ignore[attr-defined]
    return loss


def batch_mean(values: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the batch, or over the rows with weight 1 (0 for no rows) when masked."""
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp_min(1.0)


def cross_entropy(
    logits: torch.Tensor, y: torch.Tensor, mask: BatchMask | None = None
) -> torch.Tensor:
    """The batch's mean cross-entropy (over the real rows when masked)."""
    if mask is None:
        return nn.functional.cross_entropy(logits, y)
    return batch_mean(nn.functional.cross_entropy(logits, y, reduction="none"), mask.rows)


def minibatches(
    n: int, schedule: LocalSchedule, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Index batches: ``steps`` batches if set, else ``epochs`` shuffled passes over n samples."""
    bs = min(schedule.batch_size, n)
    if schedule.steps is not None:
        per_epoch = max(n // bs, 1)
        epochs = -(-schedule.steps // per_epoch)
    else:
        epochs = schedule.epochs
    count = 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, bs):
            idx = perm[start : start + bs]
            if schedule.steps is not None and len(idx) < bs and n >= bs:
                continue
            yield idx
            count += 1
            if schedule.steps is not None and count >= schedule.steps:
                return


class ClientAlgorithm(Component):
    """Base client: plain local SGD on cross-entropy. Objectives override ``loss`` or ``plan``."""

    name: ClassVar[str]
    HParams: ClassVar[type[BaseHParams]] = BaseHParams
    hp: BaseHParams
    uplink: tuple[str, ...] = ("delta",)  # the vectors sent: "delta" and/or named extras
    personalized: ClassVar[bool] = False  # keeps personal models (``personal_params``)
    # The vectorised engine vmaps the plan's loss (with a BatchMask) for objectives that set
    # this; the others give ``not_vectorised`` as the reason they train sequentially.
    vectorisable: ClassVar[bool] = False
    not_vectorised: ClassVar[str] = "its loss has not been written for padded batches"
    # what the loss and ``prepare_model`` call beyond ``model(x)`` (fedcore.core.models.protocol)
    model_needs: tuple[str, ...] = ()


    def not_vectorised_reason(self) -> str | None:
        """Why this objective (with its hparams) trains sequentially; None: it vectorises."""
        return None if self.vectorisable else self.not_vectorised

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """This client's local work in the round: plain minibatches (drawn now from
        ``ctx.generator``) on ``loss``. Objectives extend it (a proximal mu, a gradient shift,
        frozen models, tuplet batches, a follow-up pass)."""
        return LocalPlan(list(minibatches(ctx.data.num_train, ctx.schedule, ctx.generator)),
                         self.loss)

    @plain_cross_entropy
    def loss(self, b: Batch) -> torch.Tensor:
        """The objective of one batch: the one definition both engines execute (the vectorised
        one passes a functional model view and a mask; see ``vectorisable``)."""
        return cross_entropy(b.model(b.x), b.y, b.mask)

    def finish(self, done: Finished) -> None:
        """Complete the update after training, in both engines: per-client stats (keys with a
        ``/`` become round metrics), extra uplink vectors, state to keep or commit;
        ``done.model`` holds the local model and may be used as scratch."""

    def commit(self, c: Commit) -> None:
        """Update client state once the server has judged the update; called for every
        sampled client."""

    @classmethod
    def update_objective(cls, hp: BaseHParams) -> tuple[str, BaseHParams]:
        """The name and hyper-parameters of the objective whose update reaches the server: this
        one, unless it wraps another objective that trains the global model."""
        return cls.name, hp

    @classmethod
    def wrapping(cls, inner: str) -> str | None:
        """How a config names this client wrapping the objective ``inner`` (None: it wraps no
        objective); error messages offer it where a rule needs ``inner``'s update."""
        return None

    @property
    def projection_dim(self) -> int | None:
        """Width of a projection head the model gets in ``prepare_model``; None: none."""
        return None

    def prepare_model(self, model: FedModel) -> None:
        """Adapt the freshly built model before theta is taken (e.g. add a projection head)."""

    def personal_params(
        self, state: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """A personalised client's (flat params, buffers) from its state; None if not personal."""
        return None

    def callbacks(self) -> list[Callback]:
        """Round-loop callbacks this objective contributes (e.g. evaluating its personal
        models); the run calls them after the built-in evaluation."""
        return []
