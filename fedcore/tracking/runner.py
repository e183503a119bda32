"""Run one simulation recorded in MLflow, resuming an unfinished run; find finished runs."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from fedcore.core.config import ExperimentConfig
from fedcore.core.data.federated import FederatedData
from fedcore.core.models.external import ModelArg
from fedcore.core.round import checkpoint, code_digest
from fedcore.core.round.simulation import Callback, Result, Simulation
from fedcore.core.runtime import faults, stopping
from fedcore.runtime_env.env import pin_torch_threads
from fedcore.tracking.mlflow_tracker import MLflowTracker
from fedcore.tracking.provenance import CODE_DIGEST_TAG, code_label
from fedcore.tracking.run_store import MlflowRunStore, RunRecord
from fedcore.tracking.settings import TrackingSettings

if TYPE_CHECKING:
    from mlflow.entities import Run

log = logging.getLogger("fedcore")
SUPERSEDED_TAG = "fedcore.superseded_by"


def run_tracked(
    cfg: ExperimentConfig,
    parent_run_id: str | None = None,
    callbacks: list[Callback] | tuple[Callback, ...] = (),
    tags: dict[str, str] | None = None,
    settings: TrackingSettings | None = None,
    device: str | None = None,
    resume: bool = True,
    run_name: str | None = None,
    data: FederatedData | None = None,
    wait: bool = True,
    figures: bool = True,
    model: ModelArg | None = None,
) -> tuple[str, Result]:
    """Simulate ``cfg`` as one MLflow run; a failure marks the run FAILED with its reason.

    Args:
        cfg: the experiment ([`load_config`][fedcore.api.load_config]).
        parent_run_id: the run to nest this one under (a sweep's or study's parent).
        callbacks: the user's callbacks, called before the tracker records a round.
        tags: extra run tags.
        settings: the MLflow store and options (default: mlflow.yml / MLFLOW_TRACKING_URI).
        device: pins the run to one device (a GPU slot) without changing its config hash.
        resume: False always starts a new run (an Optuna trial owns its run); True continues
            an unfinished run of the same config from its checkpoint.
        run_name: replaces the default ``<method>-<dataset>-a<alpha>-s<seed>``.
        data: the already-built federated data of ``cfg`` (a sweep shares it between cells),
            or own data ([`federate`][fedcore.api.federate]), recorded by name and digest.
        wait: False returns once the last round is recorded, leaving the run's end (summary
            metrics, per-client table, figures, FINISHED) to a background writer (a sweep's
            next cell trains meanwhile; `wait_for_runs` waits for it).
        figures: False records no per-run figures (a sweep cell; its report draws them).
        model: own model (an ``nn.Module``, a class or a factory), recorded as the config
            records it (its name, digest and config hash).

    Returns:
        The MLflow run id and the simulation's result.
    """
    _before_a_run()
    sim = Simulation(cfg, device=device, data=data, model=model)
    cfg = sim.cfg  # with own data or model: the config that records them
    tracker = MLflowTracker(
        settings, parent_run_id=parent_run_id, run_name=run_name, tags=tags,
        finish_in_background=not wait, figures=figures,
    )
    code = code_digest.of_config(cfg)
    with _CLAIM:
        unfinished = _unfinished(tracker.store, cfg.config_hash()) if resume else []
        previous = next((r for r in unfinished if r.tags.get(CODE_DIGEST_TAG) == code), None)
        if previous is not None:
            tracker.resume(previous.run_id, cfg.resolved()["method"])
        else:
            tracker.start(cfg.resolved(), cfg.config_hash())
        run_id = tracker.active_run_id
        _supersede(tracker.store, [r for r in unfinished if r.tags.get(CODE_DIGEST_TAG) != code],
                   run_id)
        _ACTIVE.add(run_id)
    sim.callbacks = [*callbacks, tracker]  # last: it records the metrics the others return
    try:
        state = checkpoint.latest(checkpoint.run_folder(cfg), code) if resume else None
        if state is None and previous is not None:
            state = tracker.download_checkpoint(
                checkpoint.key_for(checkpoint.run_folder(cfg).parent))
            state = state if state is None or checkpoint.same_code(state, code) else None
        if state is not None:
            sim.resume(state)
        result = sim.run()
    except BaseException as exc:  # an exception's ``run_status`` (e.g. KILLED) wins over FAILED
        tracker.fail(f"{type(exc).__name__}: {exc}", getattr(exc, "run_status", "FAILED"))
        _label(exc, run_id, sim.round)
        _label_disk_full(exc, tracker.settings)
        _ACTIVE.discard(run_id)
        raise
    if tracker.finished is None:
        _ACTIVE.discard(run_id)
    else:  # still this process's run until its end is written
        _FINISHING[run_id] = tracker.finished
        tracker.finished.add_done_callback(lambda _: _ACTIVE.discard(run_id))
        tracker.finished.add_done_callback(lambda _: _FINISHING.pop(run_id, None))
    return run_id, result


def _before_a_run() -> None:
    """No new run once a stop was requested; one torch thread count for every runner, so a
    cell gives the same numbers however it is run (docs/explanation/reproducibility.md)."""
    stopping.check(0)
    pin_torch_threads()


def finishing(run_id: str) -> Future[None] | None:
    """The background writing of ``run_id``'s end (``wait=False``), while it is not done."""
    return _FINISHING.get(run_id)


def _label(exc: BaseException, run_id: str | None, round: int) -> None:
    """Note on the exception which run failed and its last completed round (the CLI's one-line
    message; 0 = before the first round completed)."""
    try:
        exc.fedcore_run_id = run_id  # type: ignore[attr-defined]
        exc.fedcore_round = round  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__
        pass


def _label_disk_full(exc: BaseException, settings: TrackingSettings) -> None:
    """A full disk under the MLflow store (SQLite's "database or disk is full", deep in an
    MlflowException) becomes the failure's one-line cause, naming the store; an ``OSError``
    (a checkpoint, an artifact) already names its file."""
    if not faults.is_disk_full(exc) or isinstance(exc, OSError):
        return
    store = settings.tracking_uri.removeprefix("sqlite:///")
    try:
        exc.fedcore_cause = str(faults.no_space(f"the MLflow store {store}"))  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__
        pass


_CLAIM = threading.Lock()
_ACTIVE: set[str] = set()  # runs this process is writing now (never resumed by another thread)
_FINISHING: dict[str, Future[None]] = {}  # runs whose end a background writer is writing


def _unfinished(store: MlflowRunStore, config_hash: str) -> list[RunRecord]:
    """The runs with this config hash that did not finish and that no live process owns,
    newest first, of any code; runs already superseded are left out.

    A run is RUNNING after its process was killed, FAILED after an exception or divergence,
    KILLED when stopped. A RUNNING run whose writer process is alive on this host, or that a
    thread of this process writes now, is left alone.
    """
    return [
        run for run in store.search(config_hash, "!= 'FINISHED'", 50)
        if run.run_id not in _ACTIVE and SUPERSEDED_TAG not in run.tags
        and not (run.status == "RUNNING" and _writer_alive(run.tags))
    ]


def _supersede(store: MlflowRunStore, runs: list[RunRecord], new_run_id: str) -> None:
    """Mark unfinished runs of other code as never to be resumed: tag ``fedcore.superseded_by``
    with the run that replaces them, and end a RUNNING one (its writer is dead) as KILLED; a
    FAILED or KILLED run keeps its status. Logs one line per run."""
    for run in runs:
        if run.status == "RUNNING":
            store.terminate(run.run_id, "KILLED", {SUPERSEDED_TAG: new_run_id})
        else:
            store.log_tags(run.run_id, {SUPERSEDED_TAG: new_run_id})
        log.warning("not resuming run %s (config %s): made by other code (%s); started run %s",
                    run.run_id, run.tags.get("config_hash"), code_label(run.tags), new_run_id)


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


def finished_run(
    config_hash: str, settings: TrackingSettings | None = None, any_code: bool = False,
    code: str | None = None,
) -> Run | None:
    """The newest FINISHED run with this config hash made by this code, digest ``code``
    (`fedcore.core.round.code_digest.of_config`; None: fedcore's own), or by any code with
    ``any_code``, if any."""
    runs = runs_with_hash(config_hash, "= 'FINISHED'", 1, settings,
                          code=None if any_code else code or code_digest.current())
    return runs[0] if runs else None


def other_code_runs(
    configs: Iterable[ExperimentConfig], settings: TrackingSettings | None = None
) -> list[Run]:
    """For every config without a FINISHED run of its code, its newest FINISHED run of other
    code (configs with neither are left out)."""
    store = MlflowRunStore(settings)
    if not store.has_finished_runs():  # a new store: nothing to look up cell by cell
        return []
    found = []
    for cfg in configs:  # its newest FINISHED run of any code; if other code's, one of its own?
        h, mine = cfg.config_hash(), code_digest.of_config(cfg)
        newest = next(iter(store.find(h, "= 'FINISHED'", 1)), None)
        if newest is None or newest.data.tags.get(CODE_DIGEST_TAG) == mine:
            continue
        if not store.find(h, "= 'FINISHED'", 1, mine):
            found.append(newest)
    return found


def other_code_note(configs: Iterable[ExperimentConfig],
                    settings: TrackingSettings | None = None,
                    reused: bool = False) -> str | None:
    """One line on the cells whose only FINISHED runs were made by other code (None if
    none): ``running them again``, or with ``reused`` that they are reused."""
    runs = other_code_runs(configs, settings)
    if not runs:
        return None
    labels = "; ".join(dict.fromkeys(code_label(r.data.tags) for r in runs))
    what = "reusing them (--reuse-other-code)" if reused else "running them again"
    return f"{len(runs)} cells have finished runs made by other code ({labels}); {what}"


def runs_with_hash(
    config_hash: str, status: str, limit: int, settings: TrackingSettings | None = None,
    code: str | None = None,
) -> list[Run]:
    """Runs with this config hash whose status matches ``status`` (e.g. ``"= 'FINISHED'"``),
    newest first; with ``code``, only runs of that code digest."""
    return MlflowRunStore(settings).find(config_hash, status, limit, code)
