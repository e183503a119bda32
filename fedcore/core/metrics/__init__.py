"""Round metrics: accuracy, per-client fairness, update conflict."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from fedcore.core.data.client_data import label_mix as label_mix  # where partitions compute it

if TYPE_CHECKING:
    from fedcore.core.models import FedModel

# Samples per forward pass of an evaluation. On the CPU a pass over 2,048 MNIST images held
# about 770 MB of CNN activations at once, the largest part of a run's peak memory; 256 keeps
# about 110 MB, with the same per-sample outputs bit for bit (tests/test_eval_memory.py) and no
# loss of speed. On a GPU the passes stay large (2,048), as before.
EVAL_BATCH_CPU = 256
EVAL_BATCH_CUDA = 2048


def eval_batch_size(x: torch.Tensor) -> int:
    """Samples per evaluation pass over ``x``: 2,048 on a GPU, 256 elsewhere."""
    return EVAL_BATCH_CUDA if x.is_cuda else EVAL_BATCH_CPU


@torch.no_grad()
def per_sample_eval(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, loss) for each sample, in eval mode, ``batch_size`` samples a pass
    (default: [`eval_batch_size`][fedcore.core.metrics.eval_batch_size])."""
    model.eval()
    batch_size = batch_size or eval_batch_size(x)
    correct, losses = [], []
    for start in range(0, len(y), batch_size):
        logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        correct.append(logits.argmax(1) == target)
        losses.append(nn.functional.cross_entropy(logits, target, reduction="none"))
    if not correct:
        return torch.zeros(0, dtype=torch.bool), torch.zeros(0)
    return torch.cat(correct), torch.cat(losses)


@torch.no_grad()
def eval_with_embeddings(
    model: FedModel, x: torch.Tensor, y: torch.Tensor, batch_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(correct, loss, embedding) for each sample from one forward pass, in eval mode.

    The logits are ``model.head`` of the embedding, which is what ``forward`` computes for a
    `FedModel`; a model with its own ``forward`` takes two passes. The
    batches are those of [`per_sample_eval`][fedcore.core.metrics.per_sample_eval] and
    [`embeddings`][fedcore.core.metrics.embeddings], so the numbers are the same bit for bit.
    """
    from fedcore.core.models import FedModel

    batch_size = batch_size or eval_batch_size(x)
    if type(model).forward is not FedModel.forward:
        return (*per_sample_eval(model, x, y, batch_size), embeddings(model, x, batch_size))
    model.eval()
    correct, losses, parts = [], [], []
    for start in range(0, len(y), batch_size):
        z = model.embedding(x[start : start + batch_size])
        logits = model.head(z)
        target = y[start : start + batch_size]
        correct.append(logits.argmax(1) == target)
        losses.append(nn.functional.cross_entropy(logits, target, reduction="none"))
        parts.append(z)
    if not correct:
        return torch.zeros(0, dtype=torch.bool), torch.zeros(0), torch.zeros(0, 0)
    return torch.cat(correct), torch.cat(losses), torch.cat(parts)


def decile_mean(values: np.ndarray, worst: bool) -> float:
    """Mean of the lowest (``worst``) or highest 10 % of values, at least one value."""
    if len(values) == 0:
        return math.nan
    k = max(1, math.ceil(0.1 * len(values)))
    ordered = np.sort(values)
    return float(ordered[:k].mean() if worst else ordered[-k:].mean())


def jain_index(values: np.ndarray) -> float:
    """(sum x)^2 / (n sum x^2); 1 when all equal."""
    sq = float(np.sum(values**2))
    return float(np.sum(values) ** 2 / (len(values) * sq)) if sq > 0 else 1.0


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "clients/accuracy_mean": (
            "mean over clients of the global model's accuracy on each client's local test split"
        ),
        "clients/accuracy_std": "standard deviation of those client accuracies",
        "clients/accuracy_worst10": (
            "mean accuracy of the worst 10 % of clients (at least one client)"
        ),
        "clients/accuracy_best10": "mean accuracy of the best 10 % of clients",
        "clients/jain_index": (
            "Jain's fairness index of the client accuracies, (sum a)^2 / (n sum a^2); 1 = all equal"
        ),
        "repr/intra_class_variance": (
            "mean over classes of the spread of the L2-normalised test embeddings around their "
            "class mean"
        ),
        "repr/inter_class_distance": (
            "mean squared distance between class means of the normalised test embeddings"
        ),
        "repr/intra_inter_ratio": (
            "intra_class_variance / inter_class_distance (lower: tighter, better separated classes)"
        ),
    },
}


def fairness_summary(acc: np.ndarray, prefix: str = "clients") -> dict[str, float]:
    return {
        f"{prefix}/accuracy_mean": float(acc.mean()),
        f"{prefix}/accuracy_std": float(acc.std()),
        f"{prefix}/accuracy_worst10": decile_mean(acc, worst=True),
        f"{prefix}/accuracy_best10": decile_mean(acc, worst=False),
        f"{prefix}/jain_index": jain_index(acc),
    }


def conflict_fraction(deltas: torch.Tensor, step: torch.Tensor) -> float:
    """Share of clients whose delta has a negative dot product with the server step."""
    return float((deltas @ step < 0).float().mean())


@torch.no_grad()
def embeddings(model: FedModel, x: torch.Tensor, batch_size: int | None = None) -> torch.Tensor:
    """``model.embedding(x)`` (the classifier's input) in eval mode, batched as
    [`per_sample_eval`][fedcore.core.metrics.per_sample_eval]."""
    model.eval()
    batch_size = batch_size or eval_batch_size(x)
    parts = [model.embedding(x[s : s + batch_size]) for s in range(0, len(x), batch_size)]
    return torch.cat(parts) if parts else torch.zeros(0, 0)


def representation_stats(z: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Class geometry of embeddings ``z`` (n, e) with labels ``y`` (``repr/*`` metrics).

    Each row is L2-normalised first: u_i = z_i / ||z_i||. With mu_c the mean of the u_i of
    class c, over the C classes present in ``y``:

    - ``intra_class_variance`` = (1/C) sum_c mean_{i: y_i = c} ||u_i - mu_c||^2
      (each class weighted equally, so minority classes count as much as majority ones);
    - ``inter_class_distance`` = mean over ordered pairs c != c' of ||mu_c - mu_c'||^2;
    - ``intra_inter_ratio`` = intra_class_variance / inter_class_distance (lower = tighter,
      better separated classes; NaN with fewer than 2 classes).
    """
    u = nn.functional.normalize(z.double(), dim=1)
    classes, inverse = torch.unique(y, return_inverse=True)
    c = len(classes)
    counts = torch.bincount(inverse, minlength=c).double()
    means = torch.zeros(c, u.shape[1], dtype=u.dtype, device=u.device)
    means.index_add_(0, inverse, u)
    means /= counts[:, None]
    sq = ((u - means[inverse]) ** 2).sum(1)
    intra = float((torch.bincount(inverse, sq, minlength=c) / counts).mean())
    if c < 2:
        return {"repr/intra_class_variance": intra, "repr/inter_class_distance": math.nan,
                "repr/intra_inter_ratio": math.nan}
    pair = torch.cdist(means, means) ** 2
    inter = float(pair.sum() / (c * (c - 1)))
    return {
        "repr/intra_class_variance": intra,
        "repr/inter_class_distance": inter,
        "repr/intra_inter_ratio": intra / inter if inter > 0 else math.nan,
    }


def client_stat_metrics(stats: list[dict[str, float]]) -> dict[str, float]:
    """Round metrics from the clients' ``ClientUpdate.stats``: every key containing ``/``.

    Keys ending in ``_clients`` are per-client 0/1 indicators and are summed (a count of
    clients this round, e.g. ``fedquad/fallback_clients``); every other ``/`` key is averaged
    over the clients that report it.
    """
    keys = sorted({k for s in stats for k in s if "/" in k})
    out = {}
    for key in keys:
        values = [float(s[key]) for s in stats if key in s]
        out[key] = float(sum(values)) if key.endswith("_clients") else float(np.mean(values))
    return out


def label_mix_accuracy(
    correct: torch.Tensor, loss: torch.Tensor, y_test: torch.Tensor, mix: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client's accuracy and loss on the global test set, weighted by its label mix.

    ``mix[k, c]``: the fraction of client k's training samples with label c. Client k's
    accuracy is sum_c mix[k, c] * (global accuracy on class c), its loss likewise (classes
    absent from the test set count as 0). Used when clients keep no local test split
    (``dataset.test_fraction: 0``), as FedOUI's official code trains on every sample.
    """
    classes = mix.shape[1]
    y = y_test.to(mix.device)
    counts = torch.bincount(y, minlength=classes).clamp_min(1).double()
    per_class_acc = torch.bincount(y, correct.to(mix.device).double(), minlength=classes) / counts
    per_class_loss = torch.bincount(y, loss.to(mix.device).double(), minlength=classes) / counts
    return mix.double() @ per_class_acc, mix.double() @ per_class_loss
