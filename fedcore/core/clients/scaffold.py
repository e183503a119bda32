"""SCAFFOLD client (Karimireddy et al., ICML 2020), docs/methods/scaffold.md.

Every local step adds the drift correction Gamma_i = c - c_i (server control variate from the
downlink, the client's own c_i from its store, both frozen for the round) to the raw gradient;
afterwards the client sends its delta and Delta c_i = c_i+ - c_i, and commits c_i+ only once
the server has accepted the update. Control variates are gradient-like (a positive c pushes
parameters down); deltas keep the framework's ``local - global`` sign.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import torch
from pydantic import ValidationInfo, field_validator
from torch import nn

from fedcore.core.clients.base import ClientAlgorithm, register
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need, setting
from fedcore.core.component.seeding import GLOBAL_RNG_LOCK, derive_seed
from fedcore.core.models.layout import flat_params, load_flat_params
from fedcore.core.numerics.control_variates import reconstructed_delta_c
from fedcore.core.records import ClientUpdate, LocalContext
from fedcore.core.records.plan import Commit, Finished, LocalPlan

CONTROL = "scaffold_c"  # c_i in the client store (absent: 0)


def control_of(state: Mapping[str, Any], like: torch.Tensor) -> torch.Tensor:
    """The client's control variate c_i (zeros before its first committed round)."""
    c = state.get(CONTROL)
    return torch.zeros_like(like) if c is None else c.to(like)


def server_control(ctx: LocalContext) -> torch.Tensor:
    """c from the downlink, on the parameters' device and dtype."""
    return ctx.server_payload["c"].to(ctx.global_params)


def control_variate_needs(client: str, rule: str, compressed: bool) -> list[Need]:
    """The shared config rules of the control-variate methods (docs/methods/scaffold.md):
    their own rule, plain SGD, no error feedback and, unless ``compressed``, no compressor."""
    who = f"client {client}"
    needs: list[Need] = [
        setting("method.aggregator.rule", (rule,), who, f"needs rule {rule!r}"),
        setting("local.momentum", (0.0,), who, "needs plain SGD (momentum 0)",
                "its control variate is the mean gradient of momentum-free steps"),
    ]
    if not compressed:
        needs.append(setting(
            "method.compression.compressor", ("none",), who, "sends uncompressed vectors",
            "allowed: none (use scafcom for compressed uplinks)"))
    needs.append(setting("method.compression.error_feedback", ("none",), who,
                         "keeps no residual", "allowed: none"))
    return needs


class ControlledClient(ClientAlgorithm):
    """Local SGD on F_i(y) + <Gamma_i, y>: Gamma_i = c - c_i added to every step's gradient by
    the shared SGD step (both engines); a parameter without gradient gets Gamma_i alone."""

    vectorisable = True

    def plan(self, ctx: LocalContext) -> LocalPlan:
        """Plain minibatches with the gradient shift Gamma_i = c - c_i."""
        shift = server_control(ctx) - control_of(ctx.state, ctx.global_params)
        return replace(super().plan(ctx), shift=shift)

    def mean_gradient(self, update: ClientUpdate, ctx: LocalContext) -> torch.Tensor:
        """(1/K) sum_k g_k along the local path: -delta/(K lr) + c_i - c (K > 0)."""
        c_i = control_of(ctx.state, ctx.global_params)
        lr_k = update.num_steps * ctx.schedule.lr
        return -update.delta / lr_k + c_i - server_control(ctx)


@register("scaffold")
class ScaffoldClient(ControlledClient):
    """``control``: option2 (c_i+ = the mean raw gradient along the local path, free) or
    option1 (c_i+ = the full local gradient at theta_t, one extra pass). ``uplink``: both
    (send delta and Delta c_i, 8d bytes) or reconstruct (send delta only; the server rebuilds
    Delta c_i = -c - delta/(K lr) from what it knows, option2 only)."""

    class HParams(BaseHParams):
        control: Literal["option2", "option1"] = "option2"
        uplink: Literal["both", "reconstruct"] = "both"

        @field_validator("uplink")
        @classmethod
        def _reconstruct_needs_option2(cls, uplink: str, info: ValidationInfo) -> str:
            if uplink == "reconstruct" and info.data.get("control") != "option2":
                raise ValueError(
                    "'reconstruct' rebuilds option2's Delta c_i on the server; allowed with "
                    "control=option1: both"
                )
            return uplink

    hp: HParams

    def __init__(self, hparams: HParams | None = None) -> None:
        super().__init__(hparams)
        self.uplink = ("delta",) if self.hp.uplink == "reconstruct" else ("delta", "delta_c")

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        return control_variate_needs("scaffold", "scaffold", compressed=False)

    def finish(self, done: Finished) -> None:
        update, ctx = done.update, done.ctx
        c_i = control_of(ctx.state, ctx.global_params)
        if update.num_steps == 0:  # no step taken: nothing learned, c_i kept
            delta_c = torch.zeros_like(c_i)
        elif self.hp.control == "option1":
            delta_c = self.full_gradient(ctx) - c_i
        else:  # option II: c_i+ - c_i = -c - delta / (K lr)
            delta_c = self.mean_gradient(update, ctx) - c_i
        update.stats["local_lr"] = ctx.schedule.lr
        update.pending["delta_c"] = delta_c
        if "delta_c" in self.uplink:
            update.set_vector("delta_c", delta_c)
        else:  # reconstruct: commit what the server rebuilds from the delta it receives
            update.pending["c"] = server_control(ctx)

    def full_gradient(self, ctx: LocalContext) -> torch.Tensor:
        """grad F_i(theta_t) (+ weight decay) over the whole train split, in train mode like the
        local steps whose mean gradient option II uses (docs/methods/scaffold.md: the same
        g_{i,k}); dropout draws from a stream seeded by (seed, round, client), so both
        engines and every rerun draw the same masks. BatchNorm uses batch statistics; the
        running statistics it updates are scratch (the update's buffers were taken before)."""
        model, data = ctx.model, ctx.data
        load_flat_params(model, ctx.global_params)
        was_training = model.training
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.grad = None
        n = max(data.num_train, 1)
        device = ctx.global_params.device
        devices = [device] if device.type == "cuda" else []
        seed = derive_seed(ctx.seed, "scaffold_option1", ctx.round, data.client_id)
        with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for start in range(0, data.num_train, 1024):
                x, y = data.x_train[start : start + 1024], data.y_train[start : start + 1024]
                (nn.functional.cross_entropy(model(x), y, reduction="sum") / n).backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]).detach()
        for p in params:
            p.grad = None
        model.train(was_training)
        wd = ctx.schedule.weight_decay
        return flat + wd * flat_params(model) if wd else flat

    def commit(self, c: Commit) -> None:
        """c_i <- c_i + Delta c_i as the server received it, only if it was accepted.

        With ``uplink: reconstruct`` that is the server's reconstruction from the delta it
        received (the same function on the same values), so c stays the mean of the c_i even
        when the sent delta is not the trained one (a Byzantine client's)."""
        state, update, sent = c.state, c.update, c.sent
        if not c.accepted:
            return
        if "delta_c" in sent:
            delta_c = sent["delta_c"]
        elif "c" in update.pending:
            delta_c = reconstructed_delta_c(
                sent["delta"][None],
                update.pending["c"].to(sent["delta"]),
                torch.tensor([update.num_steps], dtype=torch.long),
                torch.tensor([update.stats["local_lr"]]),
            )[0]
        else:
            delta_c = update.pending["delta_c"]
        state[CONTROL] = control_of(state, delta_c) + delta_c
