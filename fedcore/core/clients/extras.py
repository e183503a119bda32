"""Client-side statistics a server rule can ask for (``Aggregator.needs``), computed on demand.

``BEFORE_TRAINING[name](model, ctx)`` runs on the global model before local training;
``AFTER_TRAINING[name](model, ctx, num_steps, plan)`` on the local model after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from fedcore.core.numerics.oui import oui_from_preactivations, probe_indices
from fedcore.core.records import LocalContext
from fedcore.core.records.plan import LocalPlan

if TYPE_CHECKING:
    from fedcore.core.models import FedModel


@torch.no_grad()
def loss_before(model: nn.Module, ctx: LocalContext) -> float:
    """Loss of the global model on the client's train split (q-FedAvg, FedFV, FedLF)."""
    was_training = model.training
    model.eval()
    x, y = ctx.data.x_train, ctx.data.y_train
    total = torch.zeros((), device=x.device)
    for start in range(0, len(y), 1024):
        logits = model(x[start : start + 1024])
        total += nn.functional.cross_entropy(logits, y[start : start + 1024], reduction="sum")
    model.train(was_training)
    return float(total / max(len(y), 1))


def accumulation_norm(
    model: nn.Module, ctx: LocalContext, num_steps: int, plan: LocalPlan
) -> float:
    """FedNova's ||a_k||_1 for tau local steps (docs/methods/fednova.md)."""
    momentum, lr = ctx.schedule.momentum, ctx.schedule.lr
    mu = float(plan.mu)
    if mu > 0:
        return float(sum((1 - lr * mu) ** j for j in range(num_steps)))
    if momentum > 0:
        return float(sum((1 - momentum**j) / (1 - momentum) for j in range(1, num_steps + 1)))
    return float(num_steps)


def local_lr(model: nn.Module, ctx: LocalContext, num_steps: int, plan: LocalPlan) -> float:
    """The round's local learning rate eta_l (q-FedAvg's L = 1 / eta_l)."""
    return float(ctx.schedule.lr)


@torch.no_grad()
def oui(model: FedModel, ctx: LocalContext, num_steps: int, plan: LocalPlan) -> float:
    """FedOUI's o_k: OUI of the local model on the client's fixed probe (docs/methods/fedoui.md).

    The probe indices are drawn once (``probe_indices``, seeded by the experiment seed) and
    kept in ``ctx.state``; the units are those of ``model.oui_units``.
    """
    idx = ctx.state.get("oui_probe")
    if idx is None:
        idx = probe_indices(ctx.data.num_train, ctx.data.client_id, seed=ctx.seed)
        ctx.state["oui_probe"] = idx
    was_training = model.training
    model.eval()
    x = ctx.data.x_train[idx.to(ctx.data.x_train.device)]
    value = oui_from_preactivations(model.oui_units(x)) if len(idx) else 0.0
    model.train(was_training)
    return value


BEFORE_TRAINING: dict[str, Callable[..., float]] = {"loss_before": loss_before}
AFTER_TRAINING: dict[str, Callable[..., float]] = {
    "accumulation_norm": accumulation_norm,
    "local_lr": local_lr,
    "oui": oui,
}
