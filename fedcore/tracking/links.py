"""Links into the MLflow UI (runs, the experiment's training view) for Prefect and Optuna."""

from __future__ import annotations

from fedcore.tracking.settings import TrackingSettings

# MLflow 3 opens an experiment in its GenAI view unless told otherwise
TRAINING_VIEW = "workflowType=machine_learning"


def ui_base(settings: TrackingSettings) -> str:
    """The MLflow UI's address: the tracking server itself, else mlflow.yml's ``ui_url``
    (where ``fedcore ui`` serves a SQLite store)."""
    uri = settings.tracking_uri
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return settings.ui_url.rstrip("/")


def experiment_url(settings: TrackingSettings, experiment_id: str) -> str:
    return f"{ui_base(settings)}/#/experiments/{experiment_id}?{TRAINING_VIEW}"


def run_url(settings: TrackingSettings, experiment_id: str, run_id: str) -> str:
    return f"{ui_base(settings)}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"


def ui_address(settings: TrackingSettings) -> tuple[str, int]:
    """The host and port of ``ui_url`` (where ``fedcore ui`` serves, so links find it);
    127.0.0.1:5000 when it names none."""
    from urllib.parse import urlsplit

    url = urlsplit(settings.ui_url)
    try:
        port = url.port
    except ValueError:  # not a number
        port = None
    default = 443 if url.scheme == "https" else 5000
    return url.hostname or "127.0.0.1", port or default
