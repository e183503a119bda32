"""Every run records what its float32 numbers depend on beyond config, seed and code: torch's
CPU kernel level (``ATEN_CPU_CAPABILITY``), its thread count and the CPU model (the main job's
14 rows that moved against the report example were AVX2 against AVX-512 kernels; 1 against 2
torch threads changed 1,112 of 4,944 points; runs recorded neither)."""

from __future__ import annotations

import torch
from mlflow.tracking import MlflowClient

from fedcore.core.compose.configure import load_config
from fedcore.tracking.machine import (
    CPU_CAPABILITY_TAG,
    CPU_MODEL_TAG,
    TORCH_THREADS_TAG,
    cpu_model,
)
from fedcore.tracking.runner import run_tracked
from tests.conftest import TINY


def test_a_run_records_cpu_capability_thread_count_and_cpu_model(tracking):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        run_id, _ = run_tracked(load_config(None, [*TINY, "rounds=1"]), figures=False)
    finally:
        torch.set_num_threads(threads)
    tags = MlflowClient(tracking.tracking_uri).get_run(run_id).data.tags
    assert tags[CPU_CAPABILITY_TAG] == torch.backends.cpu.get_cpu_capability()
    assert tags[CPU_CAPABILITY_TAG] in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256")
    assert tags[TORCH_THREADS_TAG] == "1"
    assert tags[CPU_MODEL_TAG] == cpu_model() and tags[CPU_MODEL_TAG]
