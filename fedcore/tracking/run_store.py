"""Every write and query of a tracked run, in plain data: the one place a run meets MLflow.

``MlflowRunStore`` takes and returns strings, numbers, dicts, lists, paths and fedcore's
own records, never an MLflow object: the tracker and the resume check say what to record, and
how MLflow's client, entities and flavours record it is this module's business. MLflow itself
is imported on first use.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.core.runtime import faults
from fedcore.runtime_env.env import configure_environment
from fedcore.tracking.client import mlflow_client as mlflow_client
from fedcore.tracking.settings import TrackingSettings, load_settings

configure_environment()

# MLflow logs each SQLite error with its traceback before raising it: a full disk is reported
# once, by fedcore, in one line
faults.quiet_library_logs("mlflow.store.db.utils", "mlflow.system_metrics.system_metrics_monitor")

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

    from fedcore.core.records.client_table import ClientTable
    from fedcore.tracking.models import ModelPackage
    from fedcore.tracking.system_metrics import RunSystemMetrics

def get_experiment_id(client: MlflowClient, settings: TrackingSettings) -> str:
    """The id of the settings' experiment, created (in MLflow's training view) if missing."""
    exp = client.get_experiment_by_name(settings.experiment)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(  # experimentKind: the UI opens its training view
            settings.experiment, artifact_location=settings.artifact_location,
            tags={"mlflow.experimentKind": "custom_model_development"},
        )
    except Exception:
        exp = client.get_experiment_by_name(settings.experiment)
        if exp is None:
            raise
        return exp.experiment_id


@dataclass(frozen=True)
class RunRecord:
    """A run as the resume check sees it: its id, status and tags."""

    run_id: str
    status: str
    tags: dict[str, str]


SEARCH_PAGE = 1000  # runs per page of a paged search


class MlflowRunStore:
    """The settings' MLflow store, through one retrying client (opened on first use)."""

    def __init__(self, settings: TrackingSettings | None = None) -> None:
        self.settings = settings or load_settings()
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._system_metrics: dict[str, RunSystemMetrics] = {}

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            self._client = mlflow_client(self.settings)
        return self._client

    def open(self) -> None:
        """Open the store now (creating a new store's schema)."""
        self.experiment_id()

    def experiment_id(self) -> str:
        if self._experiment_id is None:
            self._experiment_id = get_experiment_id(self.client, self.settings)
        return self._experiment_id

    def create_run(self, name: str, tags: dict[str, str]) -> str:
        run = self.client.create_run(self.experiment_id(), run_name=name, tags=tags)
        return str(run.info.run_id)

    def log_params(self, run_id: str, params: dict[str, str], config_yaml: str) -> None:
        """The flattened config as params (100 per batch) and the config as ``config.yaml``."""
        from mlflow.entities import Param

        items = [Param(k, v[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i : i + 100])
        self.client.log_text(run_id, config_yaml, "config.yaml")

    def reopen(self, run_id: str, tags: dict[str, str], clear: tuple[str, ...]) -> list[
            tuple[str, int]]:
        """Make an unfinished run RUNNING again with ``tags``, its tags ``clear`` deleted;
        returns the (metric, step) pairs it already has."""
        from mlflow.entities import RunTag

        run = self.client.get_run(run_id)
        logged = [(m.key, m.step) for key in run.data.metrics
                  for m in self.client.get_metric_history(run_id, key)]
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        for tag in clear:
            if tag in run.data.tags:
                self.client.delete_tag(run_id, tag)
        self.client.update_run(run_id, status="RUNNING")
        return logged

    def log_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_metrics(self, run_id: str, metrics: list[tuple[str, float, int, int]]) -> None:
        """(key, value, timestamp ms, step) rows: into a SQL store in one insert
        (``fedcore.tracking.metric_rows``), else 500 per ``log_batch``."""
        from mlflow.entities import Metric

        from fedcore.tracking.links import without_credentials
        from fedcore.tracking.metric_rows import insert_metric_rows, sql_store
        from fedcore.tracking.retry import with_retry

        store = sql_store(self.client)
        if store is not None and with_retry(
                lambda: insert_metric_rows(store, run_id, metrics), "log_metrics",
                store=f"the MLflow store {without_credentials(self.settings.tracking_uri)}"):
            return
        batch = [Metric(k, v, ts, step) for k, v, ts, step in metrics]
        for i in range(0, len(batch), 500):
            self.client.log_batch(run_id, metrics=batch[i : i + 500])

    def log_dataset(self, run_id: str, description: dict[str, Any]) -> None:
        """The run's dataset input (``fedcore.tracking.inputs.dataset_description``)."""
        from fedcore.tracking.inputs import as_dataset_input, log_dataset_input

        log_dataset_input(self.client, run_id, as_dataset_input(description))

    def upload_checkpoint(self, run_id: str, path: str) -> None:
        """The file ``path`` as ``checkpoint/checkpoint.pt`` (replacing the last one)."""
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "checkpoint.pt"
            shutil.copyfile(path, copy)
            self.client.log_artifact(run_id, str(copy), "checkpoint")
        self.client.set_tag(run_id, "fedcore.checkpoint", Path(path).name)

    def download_checkpoint(self, run_id: str, folder: str) -> str | None:
        """The run's uploaded checkpoint, downloaded into ``folder`` (None: there is none)."""
        try:
            return str(self.client.download_artifacts(run_id, "checkpoint/checkpoint.pt", folder))
        except Exception:  # noqa: BLE001  (no checkpoint was uploaded)
            return None

    def start_system_metrics(self, run_id: str, interval: float, device: str,
                             resume: bool) -> None:
        from fedcore.tracking.system_metrics import RunSystemMetrics

        self._system_metrics[run_id] = RunSystemMetrics(
            run_id, self.settings.tracking_uri, interval, device, resume=resume)

    def stop_system_metrics(self, run_id: str) -> None:
        monitor = self._system_metrics.pop(run_id, None)
        if monitor is not None:
            monitor.stop()

    def log_model(self, run_id: str, package: ModelPackage) -> None:
        from fedcore.tracking.models import log_model_package

        log_model_package(self.client, run_id, package)

    def write_client_tables(self, folder: str, tables: list[ClientTable]) -> None:
        """``per_client.parquet`` and ``per_client.csv``
        (``fedcore.core.records.frames.clients_frame``) into ``folder``."""
        from fedcore.core.records.frames import clients_frame

        table = clients_frame(tables)
        table.to_parquet(Path(folder) / "per_client.parquet", index=False)
        table.to_csv(Path(folder) / "per_client.csv", index=False)

    def log_artifacts(self, run_id: str, folder: str) -> None:
        self.client.log_artifacts(run_id, folder)

    def terminate(self, run_id: str, status: str, tags: dict[str, str] | None = None) -> None:
        """Set ``tags`` (each value cut to 5,000 characters), then end the run ``status``."""
        for key, value in (tags or {}).items():
            self.client.set_tag(run_id, key, value[:5000])
        self.client.set_terminated(run_id, status)

    def find(self, config_hash: str, status: str, limit: int,
             code: str | None = None) -> list[Run]:
        """Runs with this config hash whose status matches ``status`` (``"= 'FINISHED'"``),
        newest first; with ``code``, only runs of that code digest."""
        from fedcore.tracking.provenance import CODE_DIGEST_TAG

        query = f"tags.config_hash = '{config_hash}' and attributes.status {status}"
        if code is not None:
            query += f" and tags.`{CODE_DIGEST_TAG}` = '{code}'"
        return list(self.client.search_runs([self.experiment_id()], filter_string=query,
                                            order_by=["attributes.start_time DESC"],
                                            max_results=limit))

    def has_finished_runs(self) -> bool:
        """Whether the experiment holds any FINISHED run (one search of one run)."""
        return bool(self.client.search_runs([self.experiment_id()],
                                            filter_string="attributes.status = 'FINISHED'",
                                            max_results=1))

    def finished_of_code(self, code: str) -> list[Run]:
        """Every FINISHED run made by code digest ``code``, newest first (one paged search:
        what a sweep's report reads for all its cells at once)."""
        from fedcore.tracking.provenance import CODE_DIGEST_TAG

        return self._all(f"attributes.status = 'FINISHED' and tags.`{CODE_DIGEST_TAG}` = "
                         f"'{code}'")

    def runs_of_sweep(self, name: str) -> list[Run]:
        """Every run recorded under the sweep ``name`` (its cells' and its parent's ``sweep``
        tag; a sweep name holds no quote), whatever its status, newest first."""
        return self._all(f"tags.sweep = '{name}'")

    def runs_of_config(self, config_hash: str) -> list[Run]:
        """Every run of the config ``config_hash``, whatever its status or sweep, newest first."""
        return self._all(f"tags.config_hash = '{config_hash}'")

    def matching(self, query: str) -> list[Run]:
        """Every run of the experiment that MLflow's search ``query`` matches, newest first."""
        return self._all(query)

    def _all(self, query: str) -> list[Run]:
        """Every run of the experiment matching ``query``, newest first (paged)."""
        runs: list[Run] = []
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id()], filter_string=query,
                                           order_by=["attributes.start_time DESC"],
                                           max_results=SEARCH_PAGE, page_token=token)
            runs += page
            token = page.token
            if not token:
                return runs

    def search(self, config_hash: str, status: str, limit: int,
               code: str | None = None) -> list[RunRecord]:
        """``find``'s runs as plain records."""
        return [RunRecord(r.info.run_id, r.info.status, dict(r.data.tags))
                for r in self.find(config_hash, status, limit, code)]
