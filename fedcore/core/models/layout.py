"""ParamLayout: where each parameter tensor lives in the flat vector, and its layer group."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

_NORMS = (nn.GroupNorm, nn.LayerNorm, nn.modules.batchnorm._BatchNorm)
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass(frozen=True)
class ParamSlot:
    name: str
    shape: tuple[int, ...]
    start: int
    stop: int


@dataclass(frozen=True)
class ParamLayout:
    """Flat-vector layout of a model's trainable parameters.

    ``groups`` are contiguous (start, stop) slices: one per layer, where a conv and the
    BatchNorm/GroupNorm/LayerNorm that follows it in the same parent module form one group
    (docs/methods/craft.md, "Layer groups"); norm buffers are not parameters and not grouped.
    """

    slots: tuple[ParamSlot, ...]
    groups: tuple[tuple[int, int], ...]
    group_names: tuple[str, ...] = field(default=())

    @property
    def dim(self) -> int:
        if self.slots:
            return self.slots[-1].stop
        return self.groups[-1][1] if self.groups else 0

    @classmethod
    def from_model(cls, model: nn.Module) -> ParamLayout:
        keys = _group_keys(model)
        slots, offset = [], 0
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            slots.append(ParamSlot(name, tuple(p.shape), offset, offset + p.numel()))
            offset += p.numel()
        groups: list[tuple[int, int]] = []
        names: list[str] = []
        for slot in slots:
            key = keys.get(slot.name, slot.name)
            if names and names[-1] == key:
                groups[-1] = (groups[-1][0], slot.stop)
            else:
                groups.append((slot.start, slot.stop))
                names.append(key)
        return cls(tuple(slots), tuple(groups), tuple(names))

    def whole_model(self) -> ParamLayout:
        """The same slots with a single group spanning the whole vector."""
        return ParamLayout(self.slots, ((0, self.dim),), ("model",))

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {s.name: flat[s.start : s.stop].view(s.shape) for s in self.slots}


def _group_keys(model: nn.Module) -> dict[str, str]:
    """Parameter name -> group key (its module, or the preceding conv for a norm)."""
    keys: dict[str, str] = {}
    last_conv: dict[str, str] = {}
    for mod_name, module in model.named_modules():
        parent = mod_name.rsplit(".", 1)[0] if "." in mod_name else ""
        key = mod_name
        if isinstance(module, _CONVS):
            last_conv[parent] = mod_name
        elif isinstance(module, _NORMS) and parent in last_conv:
            key = last_conv[parent]
        for pname, _ in module.named_parameters(recurse=False):
            keys[f"{mod_name}.{pname}" if mod_name else pname] = key
    return keys


def trainable_params(model: nn.Module) -> list[torch.Tensor]:
    """``model``'s parameters that require a gradient, in layout order."""
    return [p for p in model.parameters() if p.requires_grad]


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in trainable_params(model)])


def load_flat_params(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy ``flat`` into ``model``'s trainable parameters, in layout order."""
    copy_flat_into(trainable_params(model), flat)


def copy_flat_into(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy the first entries of ``flat`` into ``params``, in order (one multi-tensor copy: a
    few kernel launches on a GPU instead of one per parameter)."""
    sizes = [p.numel() for p in params]
    parts = torch.split(flat[: sum(sizes)], sizes)
    with torch.no_grad():
        torch._foreach_copy_(params, [v.view_as(p) for v, p in zip(parts, params, strict=True)])


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; a CPU tensor goes to a GPU through pinned memory without blocking,
    so the host does not wait for the queued GPU work (a plain copy from pageable memory
    synchronises the stream first)."""
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
