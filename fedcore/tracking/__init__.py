"""MLflow tracking (an edge: the core never imports this package).

The names below are imported on first use, so that a light module of the package (its
settings, the store helper of ``fedcore run``) does not import MLflow and torch with it. Any
import of the package still sets the offline, telemetry-free environment first.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from fedcore.runtime_env.env import configure_environment

configure_environment()

if TYPE_CHECKING:
    from fedcore.tracking.mlflow_tracker import MLflowTracker, get_experiment_id, mlflow_client
    from fedcore.tracking.models import load_model
    from fedcore.tracking.run_tags import flatten
    from fedcore.tracking.settings import TrackingSettings, load_settings

_WHERE = {
    "MLflowTracker": "mlflow_tracker", "flatten": "run_tags",
    "get_experiment_id": "mlflow_tracker", "mlflow_client": "mlflow_tracker",
    "load_model": "models", "TrackingSettings": "settings", "load_settings": "settings",
}

__all__ = [
    "MLflowTracker",
    "TrackingSettings",
    "flatten",
    "get_experiment_id",
    "load_model",
    "load_settings",
    "mlflow_client",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"fedcore.tracking.{_WHERE[name]}"), name)
