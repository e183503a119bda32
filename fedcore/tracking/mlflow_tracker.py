"""MLflowTracker: a round-loop callback that records one simulation as one MLflow run."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedcore.core.callbacks import Callback, RoundRecord, RoundVerdict
from fedcore.core.round import checkpoint
from fedcore.core.runtime import faults
from fedcore.specs.hparams import regime_tags
from fedcore.tracking import figure_helper
from fedcore.tracking.machine import machine_tags
from fedcore.tracking.provenance import device_tags, provenance_tags
from fedcore.tracking.run_store import MlflowRunStore
from fedcore.tracking.run_store import get_experiment_id as get_experiment_id
from fedcore.tracking.run_store import mlflow_client as mlflow_client
from fedcore.tracking.settings import TrackingSettings, load_settings
from fedcore.tracking.store_setup import store_lock as store_lock

if TYPE_CHECKING:
    from fedcore.core.records import Result, RunView

log = logging.getLogger("fedcore")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}; lists become their YAML flow form."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = (
                value
                if isinstance(value, str)
                else yaml.safe_dump(value, default_flow_style=True)
                .strip()
                .removesuffix("...")
                .strip()
            )
    return out


STOPPED_TAG = "fedcore.stopped"  # why a callback ended the run early (the run is KILLED)
CONVERGED_TAG = "fedcore.converged"  # why a callback finished the run early (it is FINISHED)
METRICS_EVERY_S = 2.0  # the longest a finished round's metrics wait before they are handed over
class _Writers:
    """The process's two background MLflow writers, started on first use.

    ``metrics``: every tracker's metric batches, in order (one thread). ``finish``: the end of
    a run (summary metrics, per-client table, figures, FINISHED) when the caller does not wait
    for it. Both finish their queued work before the interpreter exits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._finishing: set[Future[None]] = set()

    def submit(self, pool: str, fn: Callable[..., None], *args: Any) -> Future[None]:
        with self._lock:
            if pool not in self._pools:
                self._pools[pool] = ThreadPoolExecutor(1, thread_name_prefix=f"fedcore-{pool}")
            future = self._pools[pool].submit(fn, *args)
            if pool == "finish":
                self._finishing.add(future)
                future.add_done_callback(self._finishing.discard)
        return future

    def wait_finishing(self) -> None:
        """Block until every run handed to the ``finish`` writer is finished."""
        with self._lock:
            pending = list(self._finishing)
        for future in pending:
            future.exception()


WRITERS = _Writers()


def wait_for_runs() -> None:
    """Wait until the runs whose end was left to the background (``finish_in_background``)
    are FINISHED, with their artifacts."""
    WRITERS.wait_finishing()


def owner_tags() -> dict[str, str]:
    """Which process is writing a run (to tell a live run from one whose process died)."""
    return {"fedcore.host": socket.gethostname(), "fedcore.pid": str(os.getpid())}


def run_tags(resolved: dict[str, Any], config_hash: str) -> dict[str, str]:
    behaviour = resolved.get("clients", {})
    misbehaving = {
        f"clients.{k}": str(behaviour[k])
        for k in ("noisy_fraction", "noise_rate")
        if behaviour.get("noisy_fraction", 0) > 0
    }
    if behaviour.get("byzantine_fraction", 0) > 0:
        misbehaving.update(
            {
                f"clients.{k}": str(behaviour[k])
                for k in ("byzantine_fraction", "attack", "attack_strength")
            }
        )
    return {
        **misbehaving,
        "method": str(resolved["method"]["name"]),
        "dataset": str(resolved["dataset"]["name"]),
        "alpha": str(resolved["dataset"]["alpha"]),
        "partition": str(resolved["dataset"]["partition"]),
        "seed": str(resolved["seed"]),
        "config_hash": config_hash,
        **regime_tags(resolved),
    }


class MLflowTracker(Callback):
    """Records params, tags, per-round metrics and artifacts of one run.

    Uses explicit run ids (no thread-local active run), so it works from worker threads and
    Dask workers; ``parent_run_id`` nests the run under a sweep or a study.

    Writes stay off the training path: params and the rounds' metrics go to a background
    writer thread, one write in flight at most. The run's first round is handed over at once
    (the run shows in the store as training); later rounds together, at most
    ``METRICS_EVERY_S`` seconds after the first of them ended (one MLflow batch for many
    short rounds costs a third of one batch per round), so a killed process loses at most the
    rounds of its last seconds, which a resumed run logs again from its checkpoint; an
    exception, Ctrl-C, a checkpoint or the run's end hand over every round and wait for the
    writer first. With ``finish_in_background`` the run's end (summary metrics, per-client table,
    figures, FINISHED) is written by a second thread while the caller goes on (a sweep's next
    cell); ``wait_for_runs`` waits for it. ``figures=False`` leaves out the run's two
    figures (a sweep's cells: its report draws every run, and they cost ~0.3 s of CPU each).
    """

    def __init__(
        self,
        settings: TrackingSettings | None = None,
        parent_run_id: str | None = None,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        finish_in_background: bool = False,
        figures: bool = True,
    ) -> None:
        self.settings = settings or load_settings()
        self.finish_in_background = finish_in_background
        self.figures = figures
        self.finished: Future[None] | None = None  # the background end of the run, if any
        self._pending: Future[None] | None = None  # the last write handed to the metrics writer
        self._rounds: list[tuple[dict[str, float], int]] = []  # ended, not yet handed over
        self._first_waiting = 0.0  # when the oldest of them ended (time.monotonic)
        self._handed_over = False  # whether a round of this process's run went to the writer
        self.store = MlflowRunStore(self.settings)
        if figures:  # matplotlib imported by a helper process while the run trains (after a
            figure_helper.start()  # new store's schema: not competing with its migrations)
        self.parent_run_id = parent_run_id
        self.run_name = run_name
        self.extra_tags = dict(tags or {})
        self.run_id: str | None = None
        self._logged: set[tuple[str, int]] = set()  # (metric, step) already in the run
        self._system_metrics = False  # sampling while the run trains
        self._run: RunView | None = None  # the run's view, for its engine and final models
        self._resumed = False

    def start(self, resolved: dict[str, Any], config_hash: str) -> str:
        from fedcore.tracking.names import run_identity

        name, variant = run_identity(resolved)
        tags = {
            **provenance_tags(resolved["method"]), **run_tags(resolved, config_hash),
            "variant": variant, **self.extra_tags, **owner_tags(),
        }
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        name = self.run_name or name
        self.run_id = self.store.create_run(name, tags)
        self._write(self._log_params, resolved)
        return self.run_id

    @property
    def active_run_id(self) -> str:
        """The id of the run this tracker writes to (after ``start`` or ``resume``)."""
        if self.run_id is None:
            raise RuntimeError("MLflowTracker: no run yet; call start() or resume() first")
        return self.run_id

    def _log_params(self, resolved: dict[str, Any]) -> None:
        config_yaml = yaml.safe_dump(resolved, sort_keys=False)
        self.store.log_params(self.active_run_id, flatten(resolved), config_yaml)

    def _write(self, fn: Callable[..., None], *args: Any) -> None:
        """Hand ``fn(*args)`` to the metrics writer once the previous write is done."""
        self._wait()
        self._pending = WRITERS.submit("metrics", fn, *args)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _hand_over_rounds(self) -> None:
        rounds, self._rounds = self._rounds, []
        if rounds:
            self._write(self._log_rounds, rounds)

    def flush(self) -> None:
        """Hand over the rounds not yet handed over and wait until every write is done; a
        write's error, if any, is raised here."""
        self._hand_over_rounds()
        self._wait()

    def resume(self, run_id: str, method: dict[str, Any] | None = None) -> None:
        """Continue an unfinished run: RUNNING again, and no (metric, step) is logged twice.

        ``method``: the run's resolved method (its code digest covers out-of-tree code)."""
        tags = {**provenance_tags(method), **self.extra_tags, **owner_tags()}
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        logged = self.store.reopen(run_id, tags, ("failure_reason", STOPPED_TAG))
        self.run_id = run_id
        self._resumed = True
        self._logged = set(logged)

    def on_run_start(self, run: RunView) -> None:
        if self.run_id is None:
            self.start(run.cfg.resolved(), run.cfg.config_hash())
        from fedcore.tracking.inputs import dataset_description

        tags = {**device_tags(run.device), **machine_tags()}  # what float32 numbers depend on
        self._start_system_metrics(str(run.device))
        self._run = run
        if getattr(run, "engine_name", None):  # the client-training engine used, and why
            tags.update(engine=run.engine_name, engine_reason=run.engine_reason[:5000])
            self._engine_tagged = run.engine_name
        if run.round:
            tags["fedcore.resumed_from_round"] = str(run.round)
        if run.skipped_metrics:  # metrics this model cannot give (fedcore.core.models.protocol)
            tags["fedcore.skipped_metrics"] = "; ".join(
                f"{k}: {v}" for k, v in run.skipped_metrics.items()
            )
        self._write(self._log_start, tags, dataset_description(run))
        privacy = dict(getattr(run, "privacy_params", {}))
        if privacy and not self._resumed:  # z (calibrated or given), C, q, delta, accountant
            self._write(self._log_privacy, privacy)
        restored = [({k: v for k, v in h.items() if k != "round"}, int(h["round"]))
                    for h in run.history]  # rounds restored from a checkpoint
        if restored:  # the ones the run lacks, in one batch
            self._write(self._log_rounds, restored)

    def _log_privacy(self, params: dict[str, str]) -> None:
        """The privacy mechanism's resolved parameters as params (``dp.*``)."""
        from mlflow.entities import Param

        self.store.client.log_batch(self.active_run_id,
                                    params=[Param(k, v) for k, v in sorted(params.items())])

    def _log_tags(self, tags: dict[str, str]) -> None:
        self.store.log_tags(self.active_run_id, tags)

    def _log_start(self, tags: dict[str, str], dataset: dict[str, Any]) -> None:
        """The run's start tags and its federated dataset as the run's dataset input (name,
        partition, digest), written by the metrics writer."""
        self.store.log_tags(self.active_run_id, tags)
        self.store.log_dataset(self.active_run_id, dataset)

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Log the metrics this run does not have at ``step`` yet."""
        self._log_rounds([(metrics, step)])

    def _log_rounds(self, rounds: list[tuple[dict[str, float], int]]) -> None:
        """Log, in one batch, the metrics of ``rounds`` (metrics, step) that this run does not
        have yet."""
        ts = int(time.time() * 1000)
        rows = [(k, float(v), ts, step) for metrics, step in rounds
                for k, v in metrics.items() if (k, step) not in self._logged]
        self.store.log_metrics(self.active_run_id, rows)
        self._logged.update((k, step) for k, _, _, step in rows)

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        """Hand the round's metrics to the writer: those of every callback before this one
        (``run_tracked`` puts the tracker after the user's callbacks)."""
        if not self._rounds:
            self._first_waiting = time.monotonic()
        self._rounds.append((dict(record.metrics), record.round))
        if not self._handed_over or time.monotonic() - self._first_waiting >= METRICS_EVERY_S:
            self._handed_over = True  # the run's first round goes at once
            self._hand_over_rounds()
        run = self._run
        name = getattr(run, "engine_name", None)
        if run is not None and name and name != getattr(self, "_engine_tagged", name):
            self._engine_tagged = name  # the engine fell back mid-run: the tags say so
            tags = {"engine": name, "engine_reason": run.engine_reason[:5000]}
            self._write(self._log_tags, tags)
        return None

    def on_checkpoint(self, path: Path) -> None:
        """Upload the newest checkpoint as ``checkpoint/checkpoint.pt`` (replacing the last),
        once the rounds it holds are in the store."""
        self.flush()
        self.store.upload_checkpoint(self.active_run_id, str(path))

    def download_checkpoint(self, key: bytes | None = None) -> dict[str, Any] | None:
        """The run's uploaded checkpoint (the fallback when the local folder is gone), checked
        under the HMAC ``key`` (``fedcore.core.round.checkpoint.key_for``)."""
        with tempfile.TemporaryDirectory() as tmp:
            local = self.store.download_checkpoint(self.active_run_id, tmp)
            if local is None:  # no checkpoint was uploaded
                return None
            return checkpoint.load(
                Path(local),
                origin=f"checkpoint/checkpoint.pt of MLflow run {self.run_id}",
                remedy=f"delete that run (mlflow runs delete --run-id {self.run_id}) and rerun "
                "from round 1", key=key,
            )

    def _start_system_metrics(self, device: str) -> None:
        if not self.settings.system_metrics or self._system_metrics:
            return
        self.store.start_system_metrics(self.active_run_id, self.settings.system_metrics_interval,
                                        device, self._resumed)
        self._system_metrics = True

    def _stop_system_metrics(self) -> None:
        if self._system_metrics:
            self._system_metrics = False
            self.store.stop_system_metrics(self.active_run_id)

    def on_run_end(self, result: Result) -> None:
        self.flush()
        if self.finish_in_background:
            self.finished = WRITERS.submit("finish", self._finish_or_fail, result)
        else:
            self._finish(result)

    def _finish_or_fail(self, result: Result) -> None:
        try:
            self._finish(result)
        except Exception as exc:
            log.exception("run %s: recording its end failed", self.run_id)
            self.fail(f"{type(exc).__name__}: {exc}")
            raise

    def _finish(self, result: Result) -> None:
        """Summary metrics, the per-client table and the figures; then FINISHED (with the
        reason as the tag ``fedcore.converged`` when a callback finished it early), or KILLED
        with the reason as the tag ``fedcore.stopped`` when a callback paused it (running it
        again resumes it from its checkpoint)."""
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            figures = None
            # none when a stop came before the first evaluation
            if self.figures and result.client_tables:  # drawn by the helper meanwhile
                final = result.client_tables[-1]
                figures = figure_helper.draw(result.history, final.accuracy, final.round, out)
            try:
                self._log_metrics(result.summary, int(result.history[-1]["round"]))
                self._stop_system_metrics()
                if self._run is not None:
                    from fedcore.tracking.models import model_package

                    self.store.log_model(self.active_run_id, model_package(self._run))
                if result.client_tables:
                    self.store.write_client_tables(str(out), result.client_tables)
                if figures is not None:
                    figures.wait()
            finally:  # the helper is done with the folder before it is removed
                if figures is not None:
                    figures.join()
            self.store.log_artifacts(self.active_run_id, str(out))
        if result.stopped is None:
            tags = {} if result.converged is None else {CONVERGED_TAG: result.converged}
            self.store.terminate(self.active_run_id, "FINISHED", tags)
        else:
            self.store.terminate(self.active_run_id, "KILLED", {STOPPED_TAG: result.stopped})

    def fail(self, reason: str, status: str = "FAILED") -> None:
        """End the run FAILED (or KILLED, for a pruned trial) with the reason as a tag.

        Metrics logged so far are kept.
        """
        if self.run_id is None:
            return
        self._stop_system_metrics()
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001  (the failure being recorded matters more)
            if not faults.is_disk_full(exc):  # a full disk is the failure, reported once
                log.exception("run %s: a metric write failed", self.run_id)
        try:
            self.store.terminate(self.run_id, status, {"failure_reason": reason})
        except Exception as exc:
            if not faults.is_disk_full(exc):
                raise
            # the store's disk is full: the run stays RUNNING, and rerunning the command
            # resumes it once there is space (docs/how-to/checkpoints.md)
