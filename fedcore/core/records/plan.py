"""A client objective's local work as data, and the records its hooks receive.

``ClientAlgorithm.plan(ctx)`` returns a [`LocalPlan`][fedcore.core.records.plan.LocalPlan]: the
index batches, the loss, the tuplet size, the frozen models the loss evaluates, a constant gradient
shift, a proximal coefficient and an optional [`FollowUp`][fedcore.core.records.plan.FollowUp] pass
(a second model trained after the update is formed). Both engines execute the same plan
(``fedcore.core.clients.template``): the sequential one with autograd per client, the vectorised one
on stacked clients with ``vmap``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from fedcore.core.records import (
    BatchMask,
    ClientUpdate,
    FrozenParams,
    LocalContext,
    LocalSchedule,
)

if TYPE_CHECKING:
    from torch import nn

    from fedcore.core.models import ModelView


@dataclass(frozen=True)
class Batch:
    """One step's input to a loss: the model (a module, or a functional view inside vmap), the
    batch, the client's context, the padding mask (None: every row is real) and the tuplet
    size (0: plain rows; k: the rows come as k blocks, role by role)."""

    model: ModelView
    x: torch.Tensor
    y: torch.Tensor
    ctx: LocalContext
    mask: BatchMask | None = None
    arity: int = 0


Loss = Callable[[Batch], torch.Tensor]
Keep = Callable[[dict[str, Any], torch.Tensor, dict[str, torch.Tensor]], None]


@dataclass
class FollowUp:
    """A second model trained after the client's update is formed (a personal model): SGD from
    ``start`` over ``batches`` with ``schedule`` on ``loss``, pulled to the round's global model
    by the proximal term ``mu (v - theta_t)``; ``keep(state, params, buffers)`` stores it."""

    start: torch.Tensor
    buffers: dict[str, torch.Tensor]
    schedule: LocalSchedule
    batches: list[torch.Tensor]
    mu: float
    loss: Loss
    keep: Keep


@dataclass
class LocalPlan:
    """What one client does in one round, for both engines.

    ``batches``: index tensors into the client's train split, one per SGD step (drawn from
    ``ctx.generator``). ``loss``: the objective of one [`Batch`][fedcore.core.records.plan.Batch].
    ``arity``: the tuplet size of the batches (0: plain minibatches). ``frozen``: named (flat
    params, buffers) the loss reads as ``ctx.frozen[name]``, gradient-free and in eval mode; params
    that are the round's ``ctx.global_params`` are shared by a vectorised chunk, others stacked per
    client, and clients with different names train in different chunks. ``shift``: a flat d-vector
    added to every step's gradient (the local objective gains ``<shift, w>``). ``mu``: the proximal
    coefficient of ``(mu/2)||w - theta_t||^2``. ``follow_up``: a second pass.
    """

    batches: list[torch.Tensor]
    loss: Loss
    arity: int = 0
    frozen: dict[str, FrozenParams] = field(default_factory=dict)
    shift: torch.Tensor | None = None
    mu: float = 0.0
    follow_up: FollowUp | None = None


@dataclass(frozen=True)
class Finished:
    """A trained client, handed to ``ClientAlgorithm.finish``: ``model`` holds its local model
    (and may be used as scratch), ``update`` its message so far (delta, loss, stats)."""

    model: nn.Module
    ctx: LocalContext
    update: ClientUpdate
    plan: LocalPlan


@dataclass(frozen=True)
class Commit:
    """The server's judgement of one client's update, handed to ``ClientAlgorithm.commit``:
    the client's ``state``, its ``update``, the vectors as the server received them (``sent``,
    after compression) and whether they were ``accepted``."""

    state: dict[str, Any]
    update: ClientUpdate
    sent: Mapping[str, torch.Tensor]
    accepted: bool
