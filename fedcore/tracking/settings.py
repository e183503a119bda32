"""Where runs are recorded: mlflow.yml at the project root, overridden by the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fedcore.core.config import ConfigError, project_root, safe_yaml


@dataclass(frozen=True)
class TrackingSettings:
    tracking_uri: str
    artifact_location: str
    experiment: str
    system_metrics: bool = True  # sample CPU, memory (and GPU) into system/* while a run trains
    system_metrics_interval: float = 10.0  # seconds between samples
    ui_url: str = "http://127.0.0.1:5000"  # the MLflow UI (`fedcore ui`) for links to runs


def load_settings(path: Path | None = None) -> TrackingSettings:
    path = path or project_root() / "mlflow.yml"
    raw = (safe_yaml.read_file(path, "mlflow.yml") or {}) if path.is_file() else {}
    base = path.parent
    uri = os.environ.get("MLFLOW_TRACKING_URI") or raw.get("tracking_uri", "sqlite:///mlflow.db")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str((base / uri.removeprefix("sqlite:///")).resolve())
    artifacts = os.environ.get("FEDCORE_ARTIFACT_LOCATION") or raw.get(
        "artifact_location", "mlartifacts"
    )
    if "://" not in artifacts and not artifacts.startswith("mlflow-artifacts:"):
        artifacts = (base / artifacts).resolve().as_uri()
    experiment = os.environ.get("FEDCORE_EXPERIMENT") or raw.get("experiment", "fedcore")
    system = raw.get("system_metrics", True)
    interval = raw.get("system_metrics_interval", 10.0)
    if not isinstance(system, bool):
        raise ConfigError(f"mlflow.yml system_metrics: expected true or false (got {system!r})")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        raise ConfigError(
            f"mlflow.yml system_metrics_interval: expected seconds > 0 (got {interval!r})"
        )
    ui_url = os.environ.get("FEDCORE_MLFLOW_UI_URL") or raw.get("ui_url", "http://127.0.0.1:5000")
    return TrackingSettings(uri, artifacts, experiment, system, float(interval), str(ui_url))
