"""The per-client template of a round, shared by both engines.

``prepare``: the client's context, start point, before-training statistics and the objective's
plan. The engine then executes the plan's SGD steps: the sequential engine with autograd
([`run_pass`][fedcore.core.clients.template.run_pass], here), the vectorised engine on stacked
clients with ``vmap``. ``finish``: after-training statistics, the
[`ClientUpdate`][fedcore.core.records.ClientUpdate] and the objective's ``finish``. A plan's
follow-up pass runs last, once the update is formed.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from fedcore.core.clients.extras import AFTER_TRAINING, BEFORE_TRAINING
from fedcore.core.clients.sgd import sgd_step
from fedcore.core.component.seeding import derive_seed
from fedcore.core.models.layout import (
    copy_flat_into,
    flat_params,
    load_flat_params,
    to_device,
    trainable_params,
)
from fedcore.core.models.mlp_step import Step, mlp_step_for
from fedcore.core.records import ClientUpdate, FrozenParams, LocalContext, LocalSchedule
from fedcore.core.records.plan import Batch, Finished, FollowUp, LocalPlan, Loss

if TYPE_CHECKING:
    from fedcore.core.clients.base import ClientAlgorithm
    from fedcore.core.models import ModelView
    from fedcore.core.records import StageContext


@dataclass
class Prepared:
    """A client ready to train: its context, plan, start point and statistics so far."""

    ctx: LocalContext
    plan: LocalPlan
    start: torch.Tensor
    stats: dict[str, float]


@dataclass(frozen=True)
class Pass:
    """One run of SGD steps on one model: the plan's main pass or its follow-up."""

    start: torch.Tensor
    buffers: dict[str, torch.Tensor]
    schedule: LocalSchedule
    batches: list[torch.Tensor]
    loss: Loss
    arity: int = 0
    frozen: dict[str, FrozenParams] | None = None
    shift: torch.Tensor | None = None
    mu: float = 0.0


def client_seed(rc: StageContext, client_id: int) -> int:
    """The seed of a client's batches, dropout and attack noise in one round."""
    return derive_seed(rc.cfg.seed, "client", rc.round, client_id)


def local_context(rc: StageContext, client_id: int, algo: ClientAlgorithm) -> LocalContext:
    """What client ``client_id`` of objective ``algo`` sees in the round: data, state,
    generator, start, downlink."""
    ctx = LocalContext(
        model=rc.model,
        global_params=rc.params,
        global_buffers=rc.buffers,
        layout=rc.layout,
        data=rc.data.clients[client_id],
        schedule=rc.schedule,
        state=rc.store[client_id],
        generator=torch.Generator().manual_seed(client_seed(rc, client_id)),
        round=rc.round,
        needs=rc.needs,
        server_payload=rc.downlink,
        seed=rc.cfg.seed,
        step_limit=rc.step_limits.get(client_id),
    )
    ctx.start_params = rc.start_point(client_id, functools.partial(planned_steps, algo, ctx))
    return ctx


def planned_steps(algo: ClientAlgorithm, ctx: LocalContext) -> int:
    """The number of local steps ``algo`` will take in ``ctx``: its plan's batches, drawn from
    a copy of the client's generator (the real draws are left untouched)."""
    gen = torch.Generator().set_state(ctx.generator.get_state())
    return len(limited(algo.plan(replace(ctx, generator=gen)), ctx).batches)


def limited(plan: LocalPlan, ctx: LocalContext) -> LocalPlan:
    """``plan`` cut to the client's first ``ctx.step_limit`` steps (its work by a deadline)."""
    if ctx.step_limit is None or ctx.step_limit >= len(plan.batches):
        return plan
    return replace(plan, batches=plan.batches[: ctx.step_limit])


def prepare(algo: ClientAlgorithm, ctx: LocalContext) -> Prepared:
    """Load the start point into ``ctx.model``, take the before-training statistics there and
    ask the objective for its plan (which draws the batches from ``ctx.generator``)."""
    model = ctx.model
    start = ctx.start_params if ctx.start_params is not None else ctx.global_params
    load_flat_params(model, start)  # the delta stays measured from global_params
    if ctx.global_buffers:
        model.load_state_dict(ctx.global_buffers, strict=False)
    stats = {k: fn(model, ctx) for k, fn in BEFORE_TRAINING.items() if k in ctx.needs}
    return Prepared(ctx, limited(algo.plan(ctx), ctx), start, stats)


def main_pass(prep: Prepared) -> Pass:
    """The plan's main pass: the model the update is taken from."""
    plan, ctx = prep.plan, prep.ctx
    return Pass(prep.start, ctx.global_buffers, ctx.schedule, plan.batches, plan.loss,
                plan.arity, plan.frozen, plan.shift, plan.mu)


def follow_up_pass(follow: FollowUp) -> Pass:
    """A follow-up as a pass: its own start, schedule, batches, loss and pull mu."""
    return Pass(follow.start, follow.buffers, follow.schedule, follow.batches, follow.loss,
                mu=follow.mu)


def finish(
    algo: ClientAlgorithm,
    prep: Prepared,
    model: nn.Module,
    delta: torch.Tensor,
    train_loss: torch.Tensor,
    steps: int,
) -> ClientUpdate:
    """The client's update once trained (``model`` holds its local model): after-training
    statistics, the update itself, then the objective's ``finish``.

    Stats keys with a ``/`` become round metrics (``fedcore.core.metrics.client_stat_metrics``).
    """
    ctx, stats = prep.ctx, prep.stats
    stats["num_steps"] = float(steps)
    for key, fn in AFTER_TRAINING.items():
        if key in ctx.needs:
            stats[key] = fn(model, ctx, steps, prep.plan)
    update = ClientUpdate(
        client_id=ctx.data.client_id,
        delta=delta,
        num_samples=ctx.data.num_train,
        num_steps=steps,
        train_loss=train_loss,
        stats=stats,
        buffers=float_buffers(model),
    )
    algo.finish(Finished(model, ctx, update, prep.plan))
    return update


def run_client(algo: ClientAlgorithm, ctx: LocalContext) -> ClientUpdate:
    """One client's round with autograd on ``ctx.model`` (the sequential engine)."""
    prep = prepare(algo, ctx)
    model = ctx.model
    loss, steps = run_pass(ctx, main_pass(prep))
    update = finish(algo, prep, model, flat_params(model) - ctx.global_params, loss, steps)
    follow = prep.plan.follow_up
    if follow is not None:
        run_follow_up(ctx, follow)
    return update


def run_follow_up(ctx: LocalContext, follow: FollowUp) -> None:
    """Train the follow-up model on ``ctx.model`` with autograd and keep it."""
    run_pass(ctx, follow_up_pass(follow))
    follow.keep(ctx.state, flat_params(ctx.model).clone(), float_buffers(ctx.model))


def run_pass(ctx: LocalContext, run: Pass) -> tuple[torch.Tensor, int]:
    """The SGD steps of ``run`` on ``ctx.model`` with autograd: (mean train loss, steps)."""
    model, data = ctx.model, ctx.data
    params = trainable_params(model)
    copy_flat_into(params, run.start)
    if run.buffers:
        model.load_state_dict(run.buffers, strict=False)
    model.train()
    momentum: list[torch.Tensor | None] = [None] * len(params)
    anchors = ctx.global_tensors() if run.mu else None
    shifts = None if run.shift is None else [
        run.shift[s.start : s.stop].view(s.shape) for s in ctx.layout.slots
    ]
    device = data.x_train.device
    loss_sum = torch.zeros((), device=device)
    seen, steps = 0, 0
    ctx.frozen = {
        name: model_view(frozen_copy(model, p, b)) for name, (p, b) in (run.frozen or {}).items()
    }
    view = model_view(model)
    written_out = written_out_step(run, model, params)
    try:
        for idx in batches_on(run.batches, device):
            x, y = data.x_train[idx], data.y_train[idx]
            grads: Sequence[torch.Tensor | None]
            if written_out is not None:
                loss, grads = written_out(x, y)
            else:
                for p in params:
                    p.grad = None
                loss = run.loss(Batch(view, x, y, ctx, None, run.arity))
                loss.backward()
                grads = [p.grad for p in params]
            sgd_step(params, grads, momentum, run.schedule, run.mu, anchors, shifts)
            loss_sum += loss.detach() * len(idx)
            seen += len(idx)
            steps += 1
    finally:
        ctx.frozen = {}
    return loss_sum / max(seen, 1), steps


def written_out_step(run: Pass, model: nn.Module, params: list[torch.Tensor]) -> Step | None:
    """The MLP's written-out cross-entropy step for ``run`` (``fedcore.core.models.mlp_step``),
    or None where autograd runs: a loss not marked ``plain_cross_entropy``, frozen models or
    tuplets in the plan, another model."""
    if run.frozen or run.arity or not getattr(run.loss, "plain_cross_entropy", False):
        return None
    return mlp_step_for(model, params)


def batches_on(batches: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """A pass's index batches on ``device``: CPU batches travel in one copy that does not
    block the host (``fedcore.core.models.layout.to_device``), not one synchronising copy per
    step."""
    if not batches or any(b.device.type != "cpu" for b in batches) or device.type == "cpu":
        return [b.to(device) for b in batches]
    sizes = [len(b) for b in batches]
    return list(torch.split(to_device(torch.cat(batches), device), sizes))


def float_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of ``model``'s floating-point buffers (norm statistics), by name."""
    return {k: v.detach().clone() for k, v in model.named_buffers() if v.dtype.is_floating_point}


def frozen_copy(
    model: nn.Module, params: torch.Tensor, buffers: dict[str, torch.Tensor]
) -> nn.Module:
    """An eval-mode, gradient-free copy of ``model`` holding ``params`` and ``buffers``."""
    twin = copy.deepcopy(model)
    load_flat_params(twin, params)
    if buffers:
        twin.load_state_dict(buffers, strict=False)
    return twin.requires_grad_(False).eval()


def model_view(model: nn.Module) -> ModelView:
    """``model`` as the sequential engine hands it to an objective: any module offers
    ``model(x)``; objectives that call ``embedding``/``head`` run on FedModels."""
    return cast("ModelView", model)  # nn.Module types its submodules as Tensor | Module
