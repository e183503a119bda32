"""MLflow tracking (an edge: the core never imports this package)."""

from fedcore.tracking.mlflow_tracker import MLflowTracker, flatten, get_experiment_id, mlflow_client
from fedcore.tracking.models import load_model
from fedcore.tracking.settings import TrackingSettings, load_settings

__all__ = [
    "MLflowTracker",
    "TrackingSettings",
    "flatten",
    "get_experiment_id",
    "load_model",
    "load_settings",
    "mlflow_client",
]
