"""Whether the device a config names exists on this machine (the core's only device check;
the slots that pin parallel cells to GPUs are an edge: ``fedcore.runtime_env.devices``)."""

from __future__ import annotations

import torch

from fedcore.core.config.errors import ConfigError


def gpu_count() -> int:
    """CUDA devices visible to this process (0 on a CPU-only machine)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_device_present(name: str) -> None:
    """Refuse a device this machine lacks (``cuda``, ``cuda:7``, ``mps``) with a one-line
    ConfigError, before any data is loaded; ``auto`` and ``cpu`` always pass."""
    n = gpu_count()
    if name.startswith("cuda"):
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= n:
            have = f"cuda:0..cuda:{n - 1}" if n else "no CUDA device"
            raise ConfigError(
                f"device: {name!r} is not present on this machine ({have}); "
                f"allowed: auto, cpu{', cuda' if n else ''}{f', cuda:0..{n - 1}' if n else ''}"
            )
    elif name == "mps" and not (
        getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    ):
        raise ConfigError("device: 'mps' is not present on this machine; allowed: auto, cpu")
