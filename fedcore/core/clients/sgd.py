"""The one local optimiser: SGD with momentum, weight decay and a proximal term.

Both engines step with ``sgd_step``: the sequential engine on a client's parameter tensors,
the vectorised engine on the stacked flat parameters of a chunk of clients (one tensor, rows =
clients). The arithmetic is torch.optim.SGD's (single-tensor path, dampening 0, no Nesterov),
so sequential results are those of ``torch.optim.SGD``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from fedcore.core.records import LocalSchedule


@torch.no_grad()
def sgd_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    buffers: list[torch.Tensor | None],
    schedule: LocalSchedule,
    mu: float = 0.0,
    anchors: Sequence[torch.Tensor] | None = None,
    shifts: Sequence[torch.Tensor] | None = None,
) -> None:
    """p <- p - lr * m, in place, with g = grad + shift + mu (p - anchor) + wd p and m the
    momentum buffer (m = g at the first step). ``buffers`` is updated in place. A None grad is
    skipped, unless there is a shift (its raw gradient then counts as 0)."""
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        if shifts is not None:  # a constant per-round gradient shift (a drift correction)
            g = shifts[i] if g is None else g + shifts[i]
        if g is None:
            continue
        if mu:
            assert anchors is not None, "a proximal term needs anchors"
            g = g.add(p - anchors[i], alpha=mu)  # grad of (mu/2)||w - theta_t||^2
        if schedule.weight_decay:
            g = g.add(p, alpha=schedule.weight_decay)
        if schedule.momentum:
            buf = buffers[i]
            if buf is None:
                buf = buffers[i] = torch.clone(g).detach()
            else:
                buf.mul_(schedule.momentum).add_(g)
            g = buf
        p.add_(g, alpha=-schedule.lr)
