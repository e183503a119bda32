"""Where sweep cells run: a thread pool or a Dask cluster.

Prefect is imported lazily, so the CLI can check runner options before Prefect starts.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from fedcore.core.config import ConfigError

if TYPE_CHECKING:
    from prefect.task_runners import TaskRunner

RUNNERS = ("thread", "dask")
GPU_TAG = "gpu"
# What a Dask worker process needs to record into the same MLflow store and Prefect API.
WORKER_ENV = (
    "MLFLOW_TRACKING_URI",
    "FEDCORE_ARTIFACT_LOCATION",
    "FEDCORE_EXPERIMENT",
    "FEDCORE_HOME",
    "FEDCORE_DEVICE_LOCKS",
    "PREFECT_HOME",
    "PREFECT_API_URL",
    "MPLCONFIGDIR",
    "DO_NOT_TRACK",
    "MLFLOW_DISABLE_TELEMETRY",
    "PREFECT_SERVER_ANALYTICS_ENABLED",
    "PREFECT_LOGGING_LEVEL",
)


def check_runner(runner: str, workers: int, dask_address: str | None, cells_per_gpu: int) -> None:
    """Reject bad runner options before anything runs (one-line ConfigError)."""
    if runner not in RUNNERS:
        raise ConfigError(f"runner: unknown runner {runner!r}; allowed: {', '.join(RUNNERS)}")
    if workers < 1:
        raise ConfigError(f"workers: must be >= 1 (got {workers})")
    if cells_per_gpu < 1:
        raise ConfigError(f"cells_per_gpu: must be >= 1 (got {cells_per_gpu})")
    if dask_address and runner != "dask":
        raise ConfigError(f"dask_address: needs runner=dask (got runner={runner!r})")
    if dask_address:
        check_dask_address(dask_address)


DASK_CONNECT_TIMEOUT_S = 5.0


def check_dask_address(address: str, timeout: float = DASK_CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, a Dask scheduler address that nothing listens on
    (one-line ConfigError naming it), before the sweep creates its parent run. Addresses whose
    transport is not TCP (inproc://, ucx://) are left to Dask."""
    import socket
    from urllib.parse import urlsplit

    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return
    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise ConfigError(f"dask_address: {address!r} is not a scheduler address; expected "
                          "tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"dask_address: no Dask scheduler reachable at {address} ({reason}); "
                          "start one (`dask scheduler`) or leave out --dask-address") from None


def worker_env(api_url: str | None = None) -> dict[str, str]:
    """The environment a LocalCluster's worker processes get (tracking store, Prefect API)."""
    env = {k: os.environ[k] for k in WORKER_ENV if os.environ.get(k)}
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def lean_workers() -> None:
    """Start this process's Dask workers without two of Dask's defaults that cost cells time.

    * ``MALLOC_TRIM_THRESHOLD_`` (65536 in every worker Dask spawns): glibc then turns off its
      adaptive mmap threshold, so each tensor of 128 KiB or more is mapped, faulted in and
      zeroed anew at every step; a main-job cell trained 1.2-1.4x slower on a worker than in
      the flow's process (``benchmarks/worker_malloc.py``).
    * The statistical profiler (``distributed.worker.profile``): it samples the task thread's
      stack 100 times a second for the dashboard, which fedcore's LocalCluster does not serve;
      it took 14 % of the workers' CPU in a 21-cell sweep.

    Workers started elsewhere (``--dask-address``) need the same (docs/how-to/sweeps.md)."""
    import dask

    dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                     "distributed.worker.profile.enabled": False})


def local_cluster_kwargs(workers: int, api_url: str | None = None) -> dict[str, Any]:
    """The LocalCluster of a sweep: ``workers`` single-threaded processes on 127.0.0.1."""
    return {
        "n_workers": workers,
        "threads_per_worker": 1,
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": None,
        "env": worker_env(api_url),
        "preload": ["fedcore.flows.dask_worker"],  # workers ignore a terminal's Ctrl-C
    }


# LocalClusters started ahead of their sweep (start_cluster_early), by their settings
_early: dict[str, Future[Any]] = {}


def _early_key(kwargs: dict[str, Any]) -> str:
    import json

    return json.dumps(kwargs, sort_keys=True)  # the workers' env in any order


def start_cluster_early(workers: int, api_url: str | None = None) -> None:
    """Start, in a background thread, the LocalCluster that ``make_task_runner`` makes for
    these settings, so that its workers spawn and import (seconds of CPU each) while this
    process starts the Prefect server and the flow; the sweep's task runner then takes it over
    (and closes it). One not taken is closed by ``close_early_clusters``."""
    from concurrent.futures import ThreadPoolExecutor

    from distributed import LocalCluster

    from fedcore.flows.console import quiet_console

    quiet_console()  # Dask's INFO lines stay off the terminal, as in the flow
    lean_workers()
    kwargs = local_cluster_kwargs(workers, api_url)
    pool = ThreadPoolExecutor(1, thread_name_prefix="fedcore-cluster")
    _early[_early_key(kwargs)] = pool.submit(LocalCluster, **kwargs)
    pool.shutdown(wait=False)


def close_early_clusters() -> None:
    """Close the clusters started ahead that no sweep took over (e.g. a stop came first)."""
    while _early:
        _, future = _early.popitem()
        try:
            future.result().close()
        except Exception:  # noqa: BLE001  (it never started: nothing to close)
            pass


def make_task_runner(
    runner: str, workers: int, dask_address: str | None = None, api_url: str | None = None
) -> TaskRunner:
    """``thread``: ``workers`` threads here; ``dask``: the cluster at ``dask_address``, else a
    LocalCluster of ``workers`` single-threaded processes on 127.0.0.1 (the one started ahead
    for these settings by ``start_cluster_early``, if any)."""
    if runner == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    from prefect_dask.task_runners import DaskTaskRunner

    lean_workers()
    if dask_address:
        return DaskTaskRunner(address=dask_address)
    kwargs = local_cluster_kwargs(workers, api_url)
    early = _early.pop(_early_key(kwargs), None)
    if early is not None:  # the runner enters and closes it as one it made
        return DaskTaskRunner(cluster_class=early.result)
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=kwargs)


def is_ephemeral() -> bool:
    """True when no Prefect server is configured (Prefect starts a temporary local one)."""
    from prefect.settings import PREFECT_API_URL

    return not PREFECT_API_URL.value()


def current_api_url() -> str:
    """The API URL of the Prefect server this process talks to (the ephemeral one included)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url).rstrip("/")
