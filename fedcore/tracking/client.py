"""The MLflow client of a tracking URI, one per process, whose calls retry while a shared SQLite
store is locked (what ``fedcore.tracking.run_store`` records through, and what loading a
run's model reads with). MLflow is imported on first use."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, cast

from fedcore.tracking.settings import TrackingSettings, load_settings
from fedcore.tracking.store_setup import store_lock

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

_CLIENTS: dict[str, MlflowClient] = {}
_CLIENTS_LOCK = threading.Lock()


def mlflow_client(settings: TrackingSettings | None = None) -> MlflowClient:
    """An MlflowClient whose calls retry while a shared SQLite store is locked.

    Constructing the client creates or migrates the store's schema; for a SQLite store that
    happens under ``store_lock``, so processes starting together on a new store do not race.
    One client per tracking URI and process: the runs of a sweep share it (and its store).
    """
    from mlflow.tracking import MlflowClient

    from fedcore.tracking.links import without_credentials
    from fedcore.tracking.reach import bound_http_retries, hide_credentials
    from fedcore.tracking.retry import RetryingClient, with_retry

    bound_http_retries()  # a server that went away: seconds, not minutes
    settings = settings or load_settings()
    uri = settings.tracking_uri
    hide_credentials(uri)
    store = f"the MLflow store {without_credentials(uri)}"

    def make() -> MlflowClient:
        with store_lock(uri):
            return MlflowClient(tracking_uri=uri)

    with _CLIENTS_LOCK:
        client = _CLIENTS.get(uri)
        if client is None:  # reading or making the schema waits out a lock as every call does
            client = with_retry(make, "opening the store", store=store)
            _CLIENTS[uri] = client
    return cast("MlflowClient", RetryingClient(client, store))  # every method retried
