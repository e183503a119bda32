"""Ditto: a personal model per client next to the global one (Li et al., ICML 2021)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pydantic import Field, field_validator
from torch import nn

from fedcore.clients.base import (
    REGISTRY,
    ClientAlgorithm,
    ClientUpdate,
    LocalContext,
    minibatches,
    register,
)
from fedcore.clients.sgd import sgd_step
from fedcore.layout import flat_params, load_flat_params
from fedcore.metrics import per_sample_eval
from fedcore.registry import HParams

if TYPE_CHECKING:
    from fedcore.round_context import RoundContext


@register("ditto")
class DittoClient(ClientAlgorithm):
    """The global model trains with the ``inner`` objective (FedAvg by default) and is
    aggregated by any rule; then the personal model v_k (``state["ditto_personal"]``,
    initialised from theta_t at the first participation) takes its own local steps."""

    not_vectorised = (
        "each client trains a second (personal) model after the global one, with an exact "
        "proximal step per iteration; the engine vmaps one model per client"
    )

    class HParams(HParams):
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

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.inner = REGISTRY.build(self.hp.inner)

    personalized = True

    @property
    def projection_dim(self) -> int | None:
        return self.inner.projection_dim

    def prepare_model(self, model: nn.Module) -> None:
        self.inner.prepare_model(model)

    def evaluate_clients(self, rc: RoundContext) -> dict[str, np.ndarray]:
        """``personal_accuracy``: each client's personal model on its local test split (the
        global model for a client that has not trained yet)."""
        acc = np.full(rc.data.num_clients, np.nan)
        model = rc.model
        for c in rc.data.clients:
            own = self.personal_params(rc.store[c.client_id])
            params, buffers = own if own is not None else (rc.params, rc.buffers)
            load_flat_params(model, params)
            if buffers:
                model.load_state_dict(buffers, strict=False)
            if len(c.y_test):
                correct = per_sample_eval(model, c.x_test, c.y_test)[0]
                acc[c.client_id] = float(correct.double().mean())
        load_flat_params(model, rc.params)
        if rc.buffers:
            model.load_state_dict(rc.buffers, strict=False)
        return {"personal_accuracy": acc}

    def personal_params(self, state: dict[str, Any]) -> tuple[torch.Tensor, dict] | None:
        if "ditto_personal" not in state:
            return None
        return state["ditto_personal"], state["ditto_personal_buffers"]

    def batches(self, ctx: LocalContext) -> Iterator[torch.Tensor]:
        """The global model's batches: the inner objective's."""
        return self.inner.batches(ctx)

    def local_update(self, ctx: LocalContext) -> ClientUpdate:
        update = self.inner.local_update(ctx)
        self.train_personal(ctx)
        return update

    def train_personal(self, ctx: LocalContext) -> None:
        """v_k <- v_k - eta_p (grad F_k(v_k) + lam (v_k - theta_t)), the lam-term inside the
        gradient so momentum and weight decay act on it as on grad F_k (easyFL's ditto)."""
        model, data, sched = ctx.model, ctx.data, ctx.schedule
        own = self.personal_params(ctx.state)
        params, buffers = own if own is not None else (ctx.global_params, ctx.global_buffers)
        load_flat_params(model, params)
        if buffers:
            model.load_state_dict(buffers, strict=False)
        model.train()
        lr = self.hp.personal_lr if self.hp.personal_lr is not None else sched.lr
        sched = replace(sched, lr=lr)
        if self.hp.personal_steps is not None:
            sched = replace(sched, steps=self.hp.personal_steps)
        weights = [p for p in model.parameters() if p.requires_grad]
        buffers_m: list[torch.Tensor | None] = [None] * len(weights)
        anchors = ctx.global_tensors()
        for idx in minibatches(data.num_train, sched, ctx.generator):
            idx = idx.to(data.x_train.device)
            for p in weights:
                p.grad = None
            nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
            # the shared SGD with the lam-term as its proximal term (fedcore/clients/sgd.py)
            sgd_step(weights, [p.grad for p in weights], buffers_m, sched, self.hp.lam, anchors)
        ctx.state["ditto_personal"] = flat_params(model).clone()
        ctx.state["ditto_personal_buffers"] = {
            k: v.detach().clone() for k, v in model.named_buffers() if v.dtype.is_floating_point
        }
