"""A state as plain containers of tensors: numpy arrays and scalars encoded, and back."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_NUMPY = "__numpy__"


def encode(obj: Any) -> Any:
    """Numpy arrays/scalars -> tensors/Python numbers, recursively; fails on anything else."""
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, str | bool | int | float):
        return obj
    if isinstance(obj, np.ndarray):
        return {_NUMPY: torch.from_numpy(np.ascontiguousarray(obj)).clone()}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        keys = [k for k in obj if not isinstance(k, str | int)]
        if keys:
            raise TypeError(f"checkpoint: dict key {keys[0]!r} is not a str or int")
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(encode(v) for v in obj)
    raise TypeError(f"checkpoint: cannot store a {type(obj).__name__}")


def decode(obj: Any) -> Any:
    """Inverse of ``encode``."""
    if isinstance(obj, dict):
        if set(obj) == {_NUMPY}:
            return obj[_NUMPY].numpy()
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(decode(v) for v in obj)
    return obj
