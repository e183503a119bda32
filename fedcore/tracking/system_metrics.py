"""System metrics (CPU, memory, disk, network; GPU memory on CUDA) per run, in MLflow's
``system/*`` namespace (the UI's "System metrics" tab).

MLflow's own monitor samples every ``interval`` seconds in a daemon thread; a run shorter than
one interval still gets one sample at its end. GPU: MLflow's NVML monitor when ``nvidia-ml-py``
is installed, else the run's CUDA device memory read through torch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mlflow.system_metrics.metrics.base_metrics_monitor import BaseMetricsMonitor
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

from fedcore.core.runtime import faults

if TYPE_CHECKING:
    import torch

logging.getLogger("mlflow.system_metrics").setLevel(logging.ERROR)


class TorchCudaMonitor(BaseMetricsMonitor):
    """Memory of one CUDA device (device-wide used and total, and this process's reserved)."""

    def __init__(self, device: torch.device | str) -> None:
        super().__init__()
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.index = self.device.index if self.device.index is not None else 0

    def collect_metrics(self) -> None:
        free, total = self.torch.cuda.mem_get_info(self.device)
        mb = 1024 * 1024
        i = self.index
        self._metrics[f"gpu_{i}_memory_usage_megabytes"].append((total - free) / mb)
        self._metrics[f"gpu_{i}_memory_usage_percentage"].append(100 * (total - free) / total)
        reserved = self.torch.cuda.memory_reserved(self.device) / mb
        self._metrics[f"gpu_{i}_process_memory_reserved_megabytes"].append(reserved)

    def aggregate_metrics(self) -> dict[str, float]:
        return {k: round(sum(v) / len(v), 1) for k, v in self._metrics.items() if v}


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "system": {
        "system/<name>": (
            "MLflow's system metrics: CPU, memory, disk, network, and on CUDA "
            "gpu_<i>_memory_usage_* (sampled every system_metrics_interval seconds)"
        ),
    },
}


class RunSystemMetrics:
    """Samples the machine while one run trains; ``stop()`` before the run is terminated."""

    def __init__(
        self,
        run_id: str,
        tracking_uri: str,
        interval: float,
        device: torch.device | str,
        resume: bool = False,
    ) -> None:
        """``resume``: a resumed run's samples continue after its last system-metric step."""
        self.monitor = SystemMetricsMonitor(
            run_id, sampling_interval=interval, tracking_uri=tracking_uri, resume_logging=resume
        )
        has_gpu_monitor = any(type(m).__name__ == "GPUMonitor" for m in self.monitor.monitors)
        if str(device).startswith("cuda") and not has_gpu_monitor:
            self.monitor.monitors.append(TorchCudaMonitor(device))
        self.first_step = self.monitor._logging_step
        self.monitor.start()

    def stop(self) -> None:
        """Stop sampling and flush; a run shorter than one interval gets one sample now."""
        monitor = self.monitor
        monitor.finish()
        if monitor._logging_step == self.first_step:
            try:
                monitor.collect_metrics()
                monitor.publish_metrics(monitor.aggregate_metrics())
                monitor.mlflow_logger.flush()
            except Exception as exc:  # noqa: BLE001  (system metrics never fail a run)
                if not faults.is_disk_full(exc):  # a full disk is reported once, by the run
                    logging.getLogger(__name__).warning("system metrics: final sample not logged")
