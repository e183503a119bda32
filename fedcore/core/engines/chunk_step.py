"""The SGD steps of one chunk of clients: ``vmap(grad(loss))`` and the one SGD on stacked rows.

``vmapped_step`` builds the per-chunk step function: each client's loss (its plan's, the one
the sequential engine runs) on the functional view at the client's parameters, with its masks,
dropout noise and stacked frozen models. ``run_steps`` runs a chunk's steps bucket by bucket
(clients longest first; a bucket leaves after its last step) and steps with ``sgd_step`` on the
stacked flat parameters (rows = clients), momentum, weight decay, proximal pull and shift
included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
from torch.func import grad, vmap

from fedcore.core.clients.sgd import sgd_step
from fedcore.core.engines.buckets import Segment
from fedcore.core.engines.chunk_inputs import ChunkClient, ChunkInputs
from fedcore.core.engines.functional import (
    DropoutFeed,
    FrozenParamDicts,
    FunctionalModel,
    param_views,
)
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.models.layout import ParamSlot
from fedcore.core.records import BatchMask, LocalContext
from fedcore.core.records.plan import Batch, Loss

if TYPE_CHECKING:
    from fedcore.core.models import ModelView

# (params, x, y, image mask, tuplet mask, dropout masks, frozen) -> (grads, losses)
StepGrad = Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]


def vmapped_step(
    feed: DropoutFeed,
    view: FunctionalModel,
    frozen_views: dict[str, FunctionalModel],
    loss_of: Loss,
    ctx: LocalContext,
    arity: int,
) -> StepGrad:
    """``vmap(grad(one client's loss))`` over a chunk; ``ctx``: the chunk's shared context."""

    def one_client(
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        img_mask: torch.Tensor,
        tup_mask: torch.Tensor,
        masks: tuple[torch.Tensor, ...],
        frozen: FrozenParamDicts,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        feed.masks = masks
        view.params = params
        for name, tensors in frozen.items():  # this client's row of each stacked model
            frozen_views[name].params = tensors
        mask = BatchMask(img_mask, tup_mask if arity else None)
        loss = loss_of(Batch(cast("ModelView", view), x, y, ctx, mask, arity))
        feed.masks, view.params = (), {}  # no transformed tensor outlives the call
        for name in frozen:
            frozen_views[name].params = {}
        return loss, loss.detach()

    return cast(StepGrad, vmap(grad(one_client, has_aux=True)))


def run_steps(
    rc: RoundContext,
    chunk: list[ChunkClient],
    inputs: ChunkInputs,
    buckets: list[Segment],
    step_grad: StepGrad,
    stacked: dict[str, torch.Tensor],
    slots: tuple[ParamSlot, ...],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Train ``chunk``'s pass (one schedule and mu, those of one objective) from each client's
    start: (final params m x d, mean train losses)."""
    device, m = rc.device, len(chunk)
    run = chunk[0].run
    sched, mu = run.schedule, run.mu
    anchors = [rc.params] if mu else None
    shift_rows = [c.run.shift for c in chunk if c.run.shift is not None]  # all or none
    shift = torch.stack(shift_rows).to(device) if shift_rows else None
    params = torch.stack([c.run.start for c in chunk]).to(device)
    buf: torch.Tensor | None = None  # momentum, rows = clients still training
    loss_sum = torch.zeros(m, device=device)
    index, image_mask, tuplet_mask = inputs.step_index, inputs.image_mask, inputs.tuplet_mask
    rows = image_mask.sum(2)  # steps x m: real rows of each client's batch (exact counts)
    seen = rows.sum(0)
    for seg in buckets:  # a bucket leaves the batch after its last step
        k = seg.clients  # the clients still training: a prefix (longest first)
        p = params[:k]
        for t in range(seg.start, seg.stop):
            idx = index[t, :k]
            tensors = param_views(slots, p)
            frozen = {name: param_views(slots, f[:k]) for name, f in stacked.items()}
            grads, loss = step_grad(
                tensors, inputs.x[idx], inputs.y[idx], image_mask[t, :k], tuplet_mask[t, :k],
                tuple(n[t, :k] for n in inputs.noise), frozen,
            )
            g = torch.cat([grads[f"m.{s.name}"].reshape(k, -1) for s in slots], dim=1)
            bufs = [None if buf is None else buf[:k]]  # views: updated in place
            shifts = None if shift is None else [shift[:k]]
            sgd_step([p], [g], bufs, sched, mu, anchors, shifts)  # p: view of params[:k]
            buf = bufs[0] if buf is None else buf
            loss_sum[:k] += loss * rows[t, :k]
    return params, loss_sum / seen.clamp_min(1.0)
