"""``fedcore ui``: the MLflow UI on 127.0.0.1 over this project's store, opened in the training
view."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fedcore.tracking.links import TRAINING_VIEW, ui_address, without_credentials
from fedcore.tracking.settings import TrackingSettings, load_settings


def store_line(settings: TrackingSettings, run_id: str) -> str:
    """Where ``fedcore run`` recorded its run, in two lines: the store (a SQLite store's file,
    else its URI without credentials) and experiment, then how to browse it."""
    uri = settings.tracking_uri
    where = (str(Path(uri.removeprefix("sqlite:///")).resolve()) if uri.startswith("sqlite:///")
             else without_credentials(uri))
    return (f"stored in {where} (MLflow store {without_credentials(uri)}, experiment "
            f"{settings.experiment!r}, run {run_id})\n"
            "browse it: fedcore ui (the MLflow UI of this store, in the browser)")


def ui_link(host: str, port: int, experiment_id: str | None) -> str:
    """The page to open: the project's experiment in MLflow 3's training (not GenAI) view."""
    base = f"http://{host}:{port}"
    if experiment_id is None:
        return f"{base}/#/experiments?{TRAINING_VIEW}"
    return f"{base}/#/experiments/{experiment_id}/runs?{TRAINING_VIEW}"


def _experiment_id(settings: TrackingSettings) -> str | None:
    from fedcore.tracking.mlflow_tracker import mlflow_client

    client = mlflow_client(settings)
    exp = client.get_experiment_by_name(settings.experiment)
    if exp is None:
        return None
    if exp.tags.get("mlflow.experimentKind") is None:  # stores created before this tag
        client.set_experiment_tag(exp.experiment_id, "mlflow.experimentKind",
                                  "custom_model_development")
    return exp.experiment_id


def ui_command(host: str | None = None, port: int | None = None) -> int:
    """Serve the project's MLflow store (mlflow.yml / MLFLOW_TRACKING_URI) until Ctrl-C, at
    ``ui_url``'s host and port unless given (the address the runs' links point at)."""
    settings = load_settings()
    default_host, default_port = ui_address(settings)
    moved = (host or default_host, port or default_port) != (default_host, default_port)
    host, port = host or default_host, port or default_port
    shown = without_credentials(settings.tracking_uri)  # never print a password
    if settings.tracking_uri.startswith(("http://", "https://")):
        exp_id = _experiment_id(settings)
        print(f"MLflow tracking server: {shown}\n"
              f"open {shown.rstrip('/')}/#/experiments"
              + (f"/{exp_id}/runs" if exp_id else "") + f"?{TRAINING_VIEW}", flush=True)
        return 0
    exp_id = _experiment_id(settings)
    print(f"MLflow UI for {shown} (experiment {settings.experiment!r})\n"
          f"open {ui_link(host, port, exp_id)}\n(Ctrl-C stops it)", flush=True)
    if moved:
        print(f"note: the links runs record point at {without_credentials(settings.ui_url)} "
              "(ui_url in mlflow.yml, or FEDCORE_MLFLOW_UI_URL; serve there, or set it to this "
              "address)", flush=True)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", settings.tracking_uri,
           "--host", host, "--port", str(port), "--workers", "1"]
    try:
        return subprocess.run(cmd).returncode
    except KeyboardInterrupt:
        return 0
