"""The GPU path, run only where CUDA is present (``benchmarks/gpu_check.sh`` on a GPU machine).

On a CPU-only machine every test here is skipped. What they hold on a GPU: ``device=auto``
trains on CUDA and says so; a CUDA run is deterministic and agrees with the CPU run within
float32 rounding; the vectorised engine agrees with the sequential one on CUDA; a tracked CUDA
run has GPU system metrics; an interrupted CUDA run resumes bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation
from fedcore.tracking.runner import run_tracked

from .conftest import TINY
from .test_checkpoint import assert_resume_is_bit_identical
from .test_vectorised import assert_same_float32_run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

ROUNDS3 = [*TINY, "local.epochs=1", "seed=3"]


def _steps(sim: Simulation) -> int:
    local = sim.cfg.local
    return sim.cfg.rounds * local.epochs * max(
        -(-k.num_train // local.batch_size) for k in sim.data.clients)


def test_auto_device_trains_on_cuda():
    sim = Simulation(load_config(None, [*ROUNDS3, "device=auto"]))
    assert sim.device.type == "cuda"
    assert sim.params.device.type == "cuda" and sim.data.x_test.device.type == "cuda"
    result = sim.run()
    assert result.summary["final/accuracy"] > 0.3


def test_cuda_run_is_deterministic_and_agrees_with_the_cpu_run():
    over = [*ROUNDS3, "engine=sequential"]
    gpu_a = Simulation(load_config(None, [*over, "device=cuda"]))
    start = gpu_a.params.detach().cpu().clone()
    gpu_a.run()
    gpu_b = Simulation(load_config(None, [*over, "device=cuda"]))
    gpu_b.run()
    cpu = Simulation(load_config(None, [*over, "device=cpu"]))
    cpu.run()
    assert torch.equal(gpu_a.params, gpu_b.params)
    assert_same_float32_run(gpu_a.params.cpu() - start, cpu.params - start, _steps(cpu),
                            "cuda vs cpu global model")


def test_vectorised_engine_agrees_with_sequential_on_cuda():
    over = [*ROUNDS3, "device=cuda", "local.momentum=0.5"]
    seq = Simulation(load_config(None, [*over, "engine=sequential"]))
    start = seq.params.detach().clone()
    seq.run()
    vec = Simulation(load_config(None, [*over, "engine=vectorised"]))
    assert vec.engine_name == "vectorised"
    vec.run()
    assert_same_float32_run((vec.params - start).cpu(), (seq.params - start).cpu(), _steps(seq),
                            "vectorised vs sequential on cuda")


def test_tracked_cuda_run_logs_gpu_system_metrics(tracking):
    run_id, _ = run_tracked(load_config(None, [*ROUNDS3, "device=cuda"]))
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking.tracking_uri).get_run(run_id)
    assert run.data.tags["device"].startswith("cuda")
    gpu = [k for k in run.data.metrics if k.startswith("system/gpu_0_memory_usage")]
    assert gpu, sorted(run.data.metrics)


def test_interrupted_cuda_run_resumes_bit_identically(tmp_path):
    assert_resume_is_bit_identical(tmp_path, "fedavgm", "device=cuda")
