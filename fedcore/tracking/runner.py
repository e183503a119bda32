"""Run one simulation recorded in MLflow, resuming an unfinished run; find finished runs."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from fedcore import checkpoint, stopping
from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedData
from fedcore.simulation import Callback, Result, Simulation
from fedcore.tracking.mlflow_tracker import MLflowTracker, get_experiment_id, mlflow_client
from fedcore.tracking.settings import TrackingSettings, load_settings


def run_tracked(
    cfg: ExperimentConfig,
    parent_run_id: str | None = None,
    callbacks: list[Callback] | tuple = (),
    tags: dict[str, str] | None = None,
    settings: TrackingSettings | None = None,
    device: str | None = None,
    resume: bool = True,
    run_name: str | None = None,
    data: FederatedData | None = None,
    wait: bool = True,
) -> tuple[str, Result]:
    """Simulate ``cfg`` as one MLflow run; a failure marks the run FAILED with its reason.

    ``device`` pins the run to one device (a GPU slot) without changing its config hash.
    ``resume=False`` always starts a new run (an Optuna trial owns its run); ``run_name``
    replaces the default ``<method>-<dataset>-a<alpha>-s<seed>``. ``data`` is the
    already-built federated data of ``cfg`` (a sweep shares it between cells of the same data).
    ``wait=False`` returns once the last round is recorded, leaving the run's end (summary
    metrics, per-client table, figures, FINISHED) to a background writer: a sweep's next cell
    trains meanwhile, and :func:`~fedcore.tracking.mlflow_tracker.wait_for_runs` waits for it.
    """
    stopping.check(0)  # no new run once a stop was requested
    sim = Simulation(cfg, device=device, data=data)
    tracker = MLflowTracker(
        settings, parent_run_id=parent_run_id, run_name=run_name, tags=tags,
        finish_in_background=not wait,
    )
    with _CLAIM:
        previous = unfinished_run(cfg.config_hash(), tracker.settings) if resume else None
        if previous is not None:
            tracker.resume(previous.info.run_id)
        else:
            tracker.start(cfg.resolved(), cfg.config_hash())
        _ACTIVE.add(tracker.run_id)
    sim.callbacks = [tracker, *callbacks]
    try:
        state = checkpoint.latest(checkpoint.run_folder(cfg)) if resume else None
        if state is None and previous is not None:
            state = tracker.download_checkpoint()
        if state is not None:
            sim.resume(state)
        result = sim.run()
    except BaseException as exc:  # an exception's ``run_status`` (e.g. KILLED) wins over FAILED
        tracker.fail(f"{type(exc).__name__}: {exc}", getattr(exc, "run_status", "FAILED"))
        _label(exc, tracker.run_id, sim.round)
        _ACTIVE.discard(tracker.run_id)
        raise
    if tracker.finished is None:
        _ACTIVE.discard(tracker.run_id)
    else:  # still this process's run until its end is written
        run_id = tracker.run_id
        tracker.finished.add_done_callback(lambda _: _ACTIVE.discard(run_id))
    return tracker.run_id, result


def _label(exc: BaseException, run_id: str | None, round: int) -> None:
    """Note on the exception which run failed and its last completed round (the CLI's one-line
    message; 0 = before the first round completed)."""
    try:
        exc.fedcore_run_id = run_id  # type: ignore[attr-defined]
        exc.fedcore_round = round  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__
        pass


_CLAIM = threading.Lock()
_ACTIVE: set[str] = set()  # runs this process is writing now (never resumed by another thread)


def unfinished_run(config_hash: str, settings: TrackingSettings | None = None) -> Any | None:
    """The newest run with this config hash that did not finish and that no live process owns.

    A run is RUNNING after its process was killed, FAILED after an exception or divergence,
    KILLED when stopped. A RUNNING run whose writer process is alive on this host, or that a
    thread of this process writes now, is left alone.
    """
    for run in runs_with_hash(config_hash, "!= 'FINISHED'", 50, settings):
        if run.info.run_id in _ACTIVE:
            continue
        if run.info.status == "RUNNING" and _writer_alive(run.data.tags):
            continue
        return run
    return None


def _writer_alive(tags: dict[str, str]) -> bool:
    """Whether another process on this host that started or resumed the run still lives."""
    pid = int(tags.get("fedcore.pid", "0"))
    if tags.get("fedcore.host") != socket.gethostname() or pid in (0, os.getpid()):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def finished_run(config_hash: str, settings: TrackingSettings | None = None) -> Any | None:
    """The newest FINISHED run with this config hash, if any."""
    runs = runs_with_hash(config_hash, "= 'FINISHED'", 1, settings)
    return runs[0] if runs else None


def runs_with_hash(
    config_hash: str, status: str, limit: int, settings: TrackingSettings | None = None
) -> list[Any]:
    """Runs with this config hash whose status matches ``status`` (e.g. ``"= 'FINISHED'"``),
    newest first."""
    settings = settings or load_settings()
    client = mlflow_client(settings)
    return client.search_runs(
        [get_experiment_id(client, settings)],
        filter_string=f"tags.config_hash = '{config_hash}' and attributes.status {status}",
        order_by=["attributes.start_time DESC"],
        max_results=limit,
    )
