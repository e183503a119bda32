"""Client objectives as pure per-client losses with masks, for the vectorised engine.

Each loss is the sequential objective's batch mean written as a masked mean over a padded
batch, so that clients with partial batches or fewer steps share one vmapped call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from fedcore.clients._tuplets import TupletClient, sq_dist
from fedcore.clients.base import ClientAlgorithm
from fedcore.clients.fedavg import FedAvgClient
from fedcore.clients.fedprox import FedProxClient
from fedcore.clients.fedquad import FedQuadClient
from fedcore.clients.quadrupletfl import QuadrupletFLClient
from fedcore.clients.tripletfl import TripletFLClient

SUPPORTED = (FedAvgClient, FedProxClient, FedQuadClient, QuadrupletFLClient, TripletFLClient)
_HOOKS = ("local_update", "loss", "after_backward", "batches", "begin_training")

Terms = Callable[[list[torch.Tensor]], list[torch.Tensor]]


def algo_blocker(algo: ClientAlgorithm) -> str | None:
    """Why ``algo`` (the object the loop holds) cannot be vectorised; None when it can."""
    if type(algo) not in SUPPORTED:
        return f"client objective {type(algo).__name__} is not vectorised"
    patched = [h for h in _HOOKS if h in vars(algo)]
    if patched:
        return f"client objective has instance overrides of {', '.join(patched)}"
    return None


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the rows where ``mask`` is 1 (0 for no rows)."""
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def tuplet_terms(algo: TupletClient, arity: int) -> Terms:
    """Per-tuplet hinge terms whose batch means the sequential ``tuplet_loss`` adds up."""
    if isinstance(algo, TripletFLClient):
        margin = algo.hp.margin
        return lambda z: [torch.relu(sq_dist(z[0], z[1]) - sq_dist(z[0], z[2]) + margin)]
    m1, m2, anchored = algo.hp.m1, algo.hp.m2, algo.anchored

    def quad(z: list[torch.Tensor]) -> list[torch.Tensor]:
        dap = sq_dist(z[0], z[1])
        first = torch.relu(dap - sq_dist(z[0], z[2]) + m1)
        if arity == 3:
            return [first]
        second = sq_dist(z[0], z[3]) if anchored else sq_dist(z[2], z[3])
        return [first, torch.relu(dap - second + m2)]

    return quad


def client_loss(algo: ClientAlgorithm, arity: int):
    """``loss(h, logits, y, image_mask, tuplet_mask)`` of one client for tuplet size ``arity``.

    ``arity`` 0 is cross-entropy on plain minibatches; 3 or 4 adds ``beta`` times the tuplet
    hinges on L2-normalised embeddings laid out role by role (``arity`` blocks of rows).
    """
    terms = tuplet_terms(algo, arity) if arity else None
    beta = algo.hp.beta if arity else 0.0

    def loss(h, logits, y, image_mask, tuplet_mask):
        ce = masked_mean(F.cross_entropy(logits, y, reduction="none"), image_mask)
        if terms is None:
            return ce
        z = F.normalize(h, dim=1).view(arity, -1, h.shape[1])
        parts = [masked_mean(t, tuplet_mask) for t in terms(list(z))]
        total = parts[0] if len(parts) == 1 else parts[0] + parts[1]
        return ce + beta * total

    return loss


def proximal_mu(algo: ClientAlgorithm) -> float:
    """FedProx's mu (0 for the other objectives)."""
    return float(algo.hp.mu) if isinstance(algo, FedProxClient) else 0.0
