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
