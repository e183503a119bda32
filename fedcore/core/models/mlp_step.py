"""The MLP's cross-entropy step with its backward pass written out.

For plain local SGD on cross-entropy (a loss marked ``plain_cross_entropy``,
``fedcore.core.clients.base``) with fedcore's ``MLP`` on the CPU, the sequential engine
computes the loss and its gradients here instead of through autograd, as does SA-PEF's
gradient-mismatch probe. The kernels are the ones autograd runs for ``F.linear``, ``relu`` and
``cross_entropy``, called in the same order on the same operands, so the loss and every
gradient are the same bits (``tests/test_mlp_step.py``); what goes is autograd's graph and
the module calls, about half of a step's CPU at the digits MLP's size
(``benchmarks/mlp_step.py`` runs cells with and without it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from fedcore.core.models.mlp import MLP

MEAN = 1  # at::Reduction::Mean
IGNORE_INDEX = -100  # F.cross_entropy's default

Step = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, list[torch.Tensor]]]


def mlp_step_for(model: torch.nn.Module, params: list[torch.Tensor]) -> Step | None:
    """The gradient of ``F.cross_entropy(model(x), y)`` by ``mlp_cross_entropy_step``, or None
    for another model than the plain MLP (a subclass, a projection head), a frozen parameter
    (``params``: the trainable ones, in order) or a GPU."""
    if type(model) is not MLP or "projection" in model._modules:
        return None
    if len(params) != 6 or not all(p.device.type == "cpu" for p in params):
        return None  # a frozen parameter is not among the trainable ones
    return lambda x, y: mlp_cross_entropy_step(params, x, y)


@torch.no_grad()
def mlp_cross_entropy_step(
    params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(mean cross-entropy of the batch, its gradient per parameter) for the MLP
    flatten -> fc1 -> ReLU -> fc2 -> ReLU -> head, whose parameters are ``params``."""
    w1, b1, w2, b2, w3, b3 = params
    x = x.flatten(1)
    a1 = torch.relu(F.linear(x, w1, b1))
    a2 = torch.relu(F.linear(a1, w2, b2))
    logp = torch.log_softmax(F.linear(a2, w3, b3), 1)
    loss, total = torch.ops.aten.nll_loss_forward(logp, y, None, MEAN, IGNORE_INDEX)
    one = torch.ones((), dtype=logp.dtype)  # d loss / d loss, as loss.backward() seeds it
    g = torch.ops.aten.nll_loss_backward(one, logp, y, None, MEAN, IGNORE_INDEX, total)
    g = torch.ops.aten._log_softmax_backward_data(g, logp, 1, logp.dtype)
    g3w, g3b = g.t().mm(a2), g.sum(0)  # addmm's backward: dW = g^T a, db = sum_rows g
    g = torch.ops.aten.threshold_backward(g.mm(w3), a2, 0)  # d a2, through the ReLU
    g2w, g2b = g.t().mm(a1), g.sum(0)
    g = torch.ops.aten.threshold_backward(g.mm(w2), a1, 0)
    g1w, g1b = g.t().mm(x), g.sum(0)
    return loss, [g1w, g1b, g2w, g2b, g3w, g3b]
