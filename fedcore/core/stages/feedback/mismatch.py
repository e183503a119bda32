"""Gradient mismatch ||grad f(w) - grad f(w - alpha e)||^2 on a probe (docs/methods/sapef.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from fedcore.core.records import StageContext

from fedcore.core.models.layout import (
    copy_flat_into,
    flat_params,
    load_flat_params,
    trainable_params,
)
from fedcore.core.models.mlp_step import mlp_step_for

PROBE_SIZE = 256  # the first PROBE_SIZE samples of the global test set: fixed across rounds


def flat_grad(
    model: nn.Module, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """The gradient of the mean cross-entropy of ``model`` at ``params`` on (x, y), flat (the
    MLP's by its written-out backward: autograd's bits, ``fedcore.core.models.mlp_step``)."""
    trainable = trainable_params(model)
    copy_flat_into(trainable, params)
    step = mlp_step_for(model, trainable)
    if step is not None:
        return torch.cat([g.reshape(-1) for g in step(x, y)[1]])
    loss = nn.functional.cross_entropy(model(x), y)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, trainable)])


def gradient_mismatch(
    model: nn.Module,
    params: torch.Tensor,
    residuals: list[torch.Tensor | None],
    weights: list[float],
    x: torch.Tensor,
    y: torch.Tensor,
    alpha: float,
) -> float:
    """sum_k p_k ||g(w) - g(w + alpha residual_k)||^2 in eval mode (BN frozen), model restored.

    ``residual`` is stored in the delta convention (= -e), so ``w + alpha residual = w - alpha e``;
    a client without a residual yet (None) contributes 0.
    """
    if all(e is None for e in residuals):
        return 0.0
    was_training, before = model.training, flat_params(model)
    model.eval()
    g0 = flat_grad(model, params, x, y)
    total = sum(weights)
    value = sum(
        w / total * float((g0 - flat_grad(model, params + alpha * e, x, y)).pow(2).sum())
        for e, w in zip(residuals, weights, strict=True)
        if e is not None
    )
    load_flat_params(model, before)
    model.train(was_training)
    return value


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "sapef/gradient_mismatch": (
            "||grad f(w) - grad f(w - alpha e)||^2 on a probe of the test set"
        ),
    },
}


def round_gradient_mismatch(
    rc: StageContext, sampled: list[int], residuals: list[torch.Tensor | None], alpha: float
) -> dict[str, float]:
    """``sapef/gradient_mismatch`` of a round's clients at the round's start.

    Probe: the first PROBE_SIZE samples of the global test set, global BN buffers, each sampled
    client's residual before local training, at ``alpha`` (``probe_alpha``; 1: the fully
    corrected point), averaged with n_k weights. Clients without a residual yet count as 0.
    """
    weights = [float(rc.data.clients[k].num_train) for k in sampled]
    if rc.buffers:
        rc.model.load_state_dict(rc.buffers, strict=False)
    x, y = rc.data.x_test[:PROBE_SIZE], rc.data.y_test[:PROBE_SIZE]
    value = gradient_mismatch(rc.model, rc.params, residuals, weights, x, y, alpha)
    return {"sapef/gradient_mismatch": value}
