"""Offline, telemetry-free defaults for the edges (set before Prefect or MLflow are imported)."""

from __future__ import annotations

import os
from pathlib import Path

from fedcore.core.config import project_root


def configure_environment() -> None:
    """Switch off telemetry and keep Prefect/matplotlib state inside the project (user wins)."""
    state = project_root() / ".fedcore"
    defaults = {
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_HOME": str(state / "prefect"),
        "MPLCONFIGDIR": str(state / "matplotlib"),
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "GIT_PYTHON_REFRESH": "quiet",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    for key in ("PREFECT_HOME", "MPLCONFIGDIR"):
        Path(os.environ[key]).mkdir(parents=True, exist_ok=True)


THREADS_VARIABLE = "FEDCORE_TORCH_THREADS"


def torch_threads() -> int:
    """The torch intra-op thread count of every run fedcore records: ``FEDCORE_TORCH_THREADS``,
    default 1. Reductions split across threads round differently and training amplifies the
    last bits, so one fixed count makes `fedcore run`, the thread runner, Dask workers, tuning
    trials and claims give a cell the same numbers (docs/explanation/reproducibility.md)."""
    from fedcore.core.config import ConfigError

    raw = os.environ.get(THREADS_VARIABLE, "1").strip()
    if not raw.isdigit() or not 1 <= int(raw) <= 1024:
        raise ConfigError(f"{THREADS_VARIABLE}={raw[:40]!r}: expected an integer from 1 to 1024 "
                          "(torch's intra-op threads for every recorded run; default 1)")
    return int(raw)


def pin_torch_threads() -> int:
    """Set torch's intra-op thread count to ``torch_threads()`` (process-wide; every cell of a
    process sets the same count) and return it."""
    import torch

    threads = torch_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
