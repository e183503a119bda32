"""Ditto: a personal model per client next to the global one (Li et al., ICML 2021)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from pydantic import Field, field_validator

from fedcore.core.clients.base import (
    REGISTRY,
    ClientAlgorithm,
    cross_entropy,
    minibatches,
    plain_cross_entropy,
    register,
)
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, Requirement
from fedcore.core.records import LocalContext
from fedcore.core.records.plan import Batch, Commit, Finished, FollowUp, LocalPlan

if TYPE_CHECKING:
    from fedcore.core.callbacks import Callback
    from fedcore.core.models import FedModel


@register("ditto")
class DittoClient(ClientAlgorithm):
    """The global model trains with the ``inner`` objective (FedAvg by default) and is
    aggregated by any rule; then the personal model v_k (``state["ditto_personal"]``,
    initialised from theta_t at the first participation) takes its own local steps
    (the plan's follow-up pass; the vectorised engine stacks the personal models per
    client)."""

    vectorisable = True  # when the inner objective is (``not_vectorised_reason``)

    class HParams(BaseHParams):
        lam: float = Field(0.1, ge=0.0)
        personal_steps: int | None = Field(None, ge=1)  # None: the local schedule's length
        personal_lr: float | None = Field(None, gt=0.0)  # None: the round's local lr
        inner: dict[str, Any] = Field(default_factory=lambda: {"algorithm": "fedavg"})

        @field_validator("inner")
        @classmethod
        def _valid_inner(cls, spec: dict[str, Any]) -> dict[str, Any]:
            name = spec.get("algorithm")
            if name is None or name == "ditto":
                raise ValueError("inner needs an 'algorithm' other than ditto")
            try:
                hp = REGISTRY.hparams(spec)
            except KeyError as exc:
                raise ValueError(str(exc)) from None
            return {"algorithm": name, **hp.model_dump(mode="json")}

    hp: HParams

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.inner = REGISTRY.build(self.hp.inner)
        self.uplink = self.inner.uplink  # the global update is the inner objective's message
        self.model_needs = self.inner.model_needs  # the global model trains the inner loss

    personalized = True

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        """The inner objective's own needs (SCAFFOLD's aggregator rule, ...)."""
        assert isinstance(hp, cls.HParams)
        inner = REGISTRY.get(hp.inner["algorithm"])
        note = f" ({cls.name}'s inner objective {inner.name})"
        return [need.noted(note) if isinstance(need, Requirement) else need
                for need in inner.requirements(REGISTRY.hparams(hp.inner))]

    @classmethod
    def update_objective(cls, hp: BaseHParams) -> tuple[str, BaseHParams]:
        """The global update is the inner objective's."""
        assert isinstance(hp, cls.HParams)
        return hp.inner["algorithm"], REGISTRY.hparams(hp.inner)

    @classmethod
    def wrapping(cls, inner: str) -> str | None:
        return f"{cls.name!r} with inner {inner!r}"

    def commit(self, c: Commit) -> None:
        """The inner objective's state (SCAFFOLD's c_i, ...); the personal model is kept at
        training time, whatever the server decides."""
        self.inner.commit(c)

    def not_vectorised_reason(self) -> str | None:
        reason = self.inner.not_vectorised_reason()
        return None if reason is None else f"its inner objective {self.inner.name}: {reason}"

    @property
    def projection_dim(self) -> int | None:
        return self.inner.projection_dim

    def prepare_model(self, model: FedModel) -> None:
        self.inner.prepare_model(model)

    def callbacks(self) -> list[Callback]:
        """The personal models' evaluation (``personal_accuracy``, ``personal/*``,
        ``final/personal_*``), then the inner objective's callbacks."""
        from fedcore.core.callbacks.personal import PersonalEvaluation

        return [PersonalEvaluation(self), *self.inner.callbacks()]

    def personal_params(
        self, state: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        if "ditto_personal" not in state:
            return None
        return state["ditto_personal"], state["ditto_personal_buffers"]

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """The inner objective's plan for the global model, then the personal model's pass as
        its follow-up (its batches drawn after the global model's)."""
        plan = self.inner.plan(ctx)
        plan.follow_up = self.personal_training(ctx)
        return plan

    def finish(self, done: Finished) -> None:
        self.inner.finish(done)

    def personal_training(self, ctx: LocalContext) -> FollowUp:
        """v_k <- v_k - eta_p (grad F_k(v_k) + lam (v_k - theta_t)) on CE, the lam-term as the
        shared SGD's proximal term, so momentum and weight decay act on it as on grad F_k
        (easyFL's ditto)."""
        own = self.personal_params(ctx.state)
        params, buffers = own if own is not None else (ctx.global_params, ctx.global_buffers)
        lr = self.hp.personal_lr if self.hp.personal_lr is not None else ctx.schedule.lr
        sched = replace(ctx.schedule, lr=lr)
        if self.hp.personal_steps is not None:
            sched = replace(sched, steps=self.hp.personal_steps)
        batches = list(minibatches(ctx.data.num_train, sched, ctx.generator))
        return FollowUp(params, buffers, sched, batches, self.hp.lam, self.personal_loss,
                        self.keep_personal)

    @plain_cross_entropy
    def personal_loss(self, b: Batch) -> torch.Tensor:
        """F_k of the personal model: cross-entropy (over the real rows when masked)."""
        return cross_entropy(b.model(b.x), b.y, b.mask)

    @staticmethod
    def keep_personal(
        state: dict[str, Any], params: torch.Tensor, buffers: dict[str, torch.Tensor]
    ) -> None:
        state["ditto_personal"] = params
        state["ditto_personal_buffers"] = buffers
