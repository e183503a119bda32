"""The model as the vectorised engine's vmapped loss sees it: a functional view.

``functional_twin`` copies the model and replaces each active ``nn.Dropout`` by a
``MaskedDropout`` that multiplies by noise given per call (drawn up front from each client's
seeded RNG stream), so ``vmap`` can give every client its own dropout masks. ``FunctionalModel``
offers the model API an objective's loss calls (``model(x)``, ``embedding``, ``head``) at the
parameters of the current call, through ``functional_call``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.func import functional_call

from fedcore.core.models import FedModel

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from fedcore.core.models.layout import ParamSlot

FrozenParamDicts = dict[str, dict[str, torch.Tensor]]  # functional_call's parameters, by model name


class DropoutFeed:
    """Per-call dropout masks, set inside the vmapped function before the forward pass."""

    masks: tuple[torch.Tensor, ...] = ()


class MaskedDropout(nn.Module):
    """``nn.Dropout`` with its noise given: ``x * noise`` as ATen's dropout computes it."""

    def __init__(self, slot: int, feed: DropoutFeed) -> None:
        super().__init__()
        self.slot, self.feed = slot, feed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.feed.masks[self.slot]


class Parts(nn.Module):
    """The wrapped model's forward, embedding or head, chosen per call (for functional_call)."""

    def __init__(self, model: FedModel) -> None:
        super().__init__()
        self.m = model

    def forward(self, x: torch.Tensor, part: str) -> torch.Tensor:
        if part == "embedding":
            return self.m.embedding(x)
        out: torch.Tensor = self.m.head(x) if part == "head" else self.m(x)
        return out


class FunctionalModel:
    """What an objective's ``loss`` sees inside vmap: the model API (``model(x)``,
    ``embedding``, ``head``) evaluated at this call's parameters."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.params: dict[str, torch.Tensor] = {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x, "all")

    def embedding(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x, "embedding")

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self._call(h, "head")

    def _call(self, x: torch.Tensor, part: str) -> torch.Tensor:
        out: torch.Tensor = functional_call(self.parts, self.params, (x, part))
        return out


@dataclass(frozen=True)
class DropoutCall:
    name: str
    p: float
    shape: tuple[int, ...]  # per sample


def functional_twin(model: FedModel, dropouts: list[DropoutCall], feed: DropoutFeed) -> Parts:
    """A training-mode copy of ``model`` whose ``dropouts`` multiply by ``feed``'s masks."""
    twin = copy.deepcopy(model).train()
    for slot, call in enumerate(dropouts):
        parent, _, child = call.name.rpartition(".")
        owner = twin.get_submodule(parent) if parent else twin
        setattr(owner, child, MaskedDropout(slot, feed))
    return Parts(twin)


def param_views(slots: tuple[ParamSlot, ...], rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """functional_call's parameter dict of stacked flat params (k x d -> k x shape each)."""
    k = rows.shape[0]
    return {f"m.{s.name}": rows[:, s.start : s.stop].view(k, *s.shape) for s in slots}


def param_dict(slots: tuple[ParamSlot, ...], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """functional_call's parameter dict of one model's flat params (d -> shape each)."""
    return {f"m.{s.name}": flat[s.start : s.stop].view(s.shape) for s in slots}


def dropout_calls(
    model: FedModel, in_shape: tuple[int, ...], device: torch.device
) -> list[DropoutCall]:
    """The active dropout modules in the order one forward pass calls them (each once)."""
    calls: list[DropoutCall] = []
    hooks = [
        mod.register_forward_hook(
            lambda m, i, o, name=name: calls.append(DropoutCall(name, m.p, tuple(o.shape[1:])))
        )
        for name, mod in model.named_modules()
        if isinstance(mod, nn.Dropout) and mod.p > 0
    ]
    _probe(model, in_shape, device, hooks, batch=2)
    names = [c.name for c in calls]
    if len(set(names)) != len(names):
        raise ValueError(f"dropout modules called more than once per forward: {names}")
    return calls


def activation_numel(model: FedModel, in_shape: tuple[int, ...], device: torch.device) -> int:
    """Per-sample numel of all leaf-module outputs (a bound on what backward keeps)."""
    total = [0]
    hooks = [
        mod.register_forward_hook(lambda m, i, o: total.__setitem__(0, total[0] + o[0].numel()))
        for mod in model.modules()
        if not list(mod.children())
    ]
    _probe(model, in_shape, device, hooks, batch=1)
    return total[0]


def _probe(
    model: FedModel,
    in_shape: tuple[int, ...],
    device: torch.device,
    hooks: list[RemovableHandle],
    batch: int,
) -> None:
    """One forward pass of zeros through ``model`` for its ``hooks``, which are then removed.

    Eval mode and no grad: a training-mode pass would draw dropout noise from the global RNG
    that cells in other threads share.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(batch, *in_shape, device=device))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
