"""Links into the MLflow UI (runs, the experiment's training view) for Prefect and Optuna."""

from __future__ import annotations

from fedcore.tracking.settings import TrackingSettings

# MLflow 3 opens an experiment in its GenAI view unless told otherwise
TRAINING_VIEW = "workflowType=machine_learning"


def without_credentials(url: str) -> str:
    """``url`` without its ``user:password@`` part, for anything stored or printed (links in
    Optuna's and Prefect's databases, ``fedcore ui``'s output); other URLs unchanged."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url.rsplit("@", 1)[-1] if "@" in url else url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def ui_base(settings: TrackingSettings) -> str:
    """The MLflow UI's address (no credentials): the tracking server itself, else mlflow.yml's
    ``ui_url`` (where ``fedcore ui`` serves a SQLite store)."""
    uri = settings.tracking_uri
    if uri.startswith(("http://", "https://")):
        return without_credentials(uri).rstrip("/")
    return without_credentials(settings.ui_url).rstrip("/")


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
