"""Run one simulation recorded in MLflow, and find runs already finished."""

from __future__ import annotations

from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.simulation import Callback, Result, Simulation
from fedcore.tracking.mlflow_tracker import MLflowTracker, get_experiment_id, mlflow_client
from fedcore.tracking.settings import TrackingSettings, load_settings


def run_tracked(
    cfg: ExperimentConfig,
    parent_run_id: str | None = None,
    callbacks: list[Callback] | tuple = (),
    tags: dict[str, str] | None = None,
    settings: TrackingSettings | None = None,
    resume: bool = True,
) -> tuple[str, Result]:
    """Simulate ``cfg`` as one MLflow run; a failure marks the run FAILED with its reason.

    ``resume=False`` always starts a new run (an Optuna trial owns its run).
    """
    sim = Simulation(cfg)
    tracker = MLflowTracker(settings, parent_run_id=parent_run_id, tags=tags)
    tracker.start(cfg.resolved(), cfg.config_hash())
    sim.callbacks = [tracker, *callbacks]
    try:
        result = sim.run()
    except BaseException as exc:  # an exception's ``run_status`` (e.g. KILLED) wins over FAILED
        tracker.fail(f"{type(exc).__name__}: {exc}", getattr(exc, "run_status", "FAILED"))
        raise
    return tracker.run_id, result


def finished_run(config_hash: str, settings: TrackingSettings | None = None) -> Any | None:
    """The FINISHED run with this config hash, if any."""
    settings = settings or load_settings()
    client = mlflow_client(settings)
    exp_id = get_experiment_id(client, settings)
    runs = client.search_runs(
        [exp_id],
        filter_string=f"tags.config_hash = '{config_hash}' and attributes.status = 'FINISHED'",
        max_results=1,
    )
    return runs[0] if runs else None
