"""Whether an MLflow tracking server answers, asked before a command starts work, and MLflow's
HTTP retries bounded, so a server that is down or killed ends a command in seconds with one line
(MLflow's own defaults retry for about four minutes)."""

from __future__ import annotations

import os
import socket
import time
from urllib.parse import urlsplit

from fedcore.core.config import ConfigError
from fedcore.tracking.links import without_credentials

CONNECT_TIMEOUT = 3.0  # seconds per TCP connect attempt
ATTEMPTS = 3
PAUSE = 0.5  # seconds between attempts
# MLflow's HTTP settings, used unless the environment sets them: 2 retries with 1 s and 2 s
# pauses, 30 s per request (MLflow: 7 retries doubling from 2 s, 120 s per request)
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


class ServerUnreachable(ConfigError):
    """The tracking server named by the settings does not accept a connection."""


def bound_http_retries() -> None:
    """Set ``HTTP_DEFAULTS`` in the environment where they are unset (child processes,
    Prefect's and Dask's workers, inherit them)."""
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)


def hide_credentials(uri: str) -> None:
    """A tracking URI with ``user:password@``: MLflow's own "View run ... at <url>" lines,
    which print the URI with its password, are switched off (fedcore prints the run id)."""
    if "@" in urlsplit(uri).netloc:
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def check_server(uri: str) -> None:
    """Nothing for a local store; for ``http(s)://`` a TCP connection to its host and port,
    ``ATTEMPTS`` tries of ``CONNECT_TIMEOUT`` s, else ``ServerUnreachable`` naming
    the URI without its credentials."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"tracking_uri: {without_credentials(uri)!r} has no valid port") \
            from None
    cause = ""
    for attempt in range(ATTEMPTS):
        try:
            socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT).close()
            return
        except OSError as exc:
            cause = exc.strerror or type(exc).__name__
            if attempt < ATTEMPTS - 1:
                time.sleep(PAUSE)
    raise ServerUnreachable(
        f"MLflow tracking server {without_credentials(uri)} does not answer ({cause}; "
        f"{ATTEMPTS} tries); start it, or set MLFLOW_TRACKING_URI (or tracking_uri in mlflow.yml)"
    )
