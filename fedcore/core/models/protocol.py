"""What a model must offer for the methods and metrics that look inside it.

Any ``nn.Module`` mapping a batch ``x`` to class logits ``(B, num_classes)`` trains with every
method that only calls ``model(x)`` (FedAvg, FedProx, SCAFFOLD, CRAFT, CRF, ...). Some methods
and metrics need more, asked for by name:

- ``embedding(x)`` and ``head(z)``, with ``model(x) == head(embedding(x))``: the classifier's
  input ``(B, e)`` and the classifier (``EmbeddingModel``). MOON, FedQuad, TripletFL,
  QuadrupletFL and SupConFL train on embeddings; the ``repr/*`` metrics measure them (a model
  without them runs, and those metrics are skipped and the skip recorded).
- ``add_projection_head(out_dim)``: MOON puts a projection head between embedding and
  classifier (``fedcore.core.models.FedModel`` has it).
- ``oui_units(x)``: the inputs of the last ReLU before the classifier, one column per unit
  (FedOUI's overfitting indicator).

``fedcore.core.models.FedModel`` subclasses offer all of them;
``fedcore.core.compose.model_check`` refuses a model that lacks what the configured method needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from torch import nn

EMBEDDING = ("embedding", "head")
# client statistics a rule asks for (``Aggregator.needs``) that read the model's insides
STAT_NEEDS = {"oui": ("oui_units",)}
REPR_METRICS = "repr/*"


@runtime_checkable
class EmbeddingModel(Protocol):
    """A classifier split into its input embedding and its head."""

    def embedding(self, x: torch.Tensor) -> torch.Tensor:
        """The classifier's input, shape (B, e)."""
        ...

    def head(self, z: torch.Tensor) -> torch.Tensor:
        """Class logits from the embedding, shape (B, num_classes)."""
        ...


def missing(model: nn.Module, names: Iterable[str]) -> list[str]:
    """The names in ``names`` that ``model`` does not offer as callables."""
    return [n for n in dict.fromkeys(names) if not callable(getattr(model, n, None))]


def has_embedding(model: nn.Module) -> bool:
    """Whether ``model`` offers ``embedding(x)`` and ``head(z)`` (the ``repr/*`` metrics)."""
    return not missing(model, EMBEDDING)
