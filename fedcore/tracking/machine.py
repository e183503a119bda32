"""What a run's float32 numbers depend on beyond its config, seed and code: the CPU kernels
torch picks (``ATEN_CPU_CAPABILITY``: avx2 and avx512 kernels round differently), the number
of torch threads (reductions split differently) and the CPU model. Every run records them as
tags, so two runs that differ can be told apart (docs/explanation/reproducibility.md)."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

CPU_CAPABILITY_TAG = "fedcore.cpu_capability"
TORCH_THREADS_TAG = "fedcore.torch_threads"
CPU_MODEL_TAG = "fedcore.cpu_model"


def machine_tags() -> dict[str, str]:
    """The CPU kernel level torch uses, its intra-op thread count now, and the CPU model."""
    import torch

    return {
        CPU_CAPABILITY_TAG: str(torch.backends.cpu.get_cpu_capability()),
        TORCH_THREADS_TAG: str(torch.get_num_threads()),
        CPU_MODEL_TAG: cpu_model(),
    }


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``, else the platform's
    processor or machine name, else ``unknown``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()[:250]
    except OSError:
        pass
    return (platform.processor() or platform.machine() or "unknown")[:250]
