"""A temporary Prefect server owned by this process, for sweeps and studies run without one.

Prefect starts its own temporary server when no ``PREFECT_API_URL`` is set, but a parent killed
with SIGKILL leaves it running, and tag concurrency slots that the killed run held stay taken
in the database under ``PREFECT_HOME`` (their leases lived in the dead server's memory), so the
next sweep would wait for them forever. ``prefect_api`` instead starts the server here:

* the server asks for ``PR_SET_PDEATHSIG`` (Linux): the kernel kills it when this process dies;
* it runs in its own session, so a Ctrl-C in the terminal (SIGINT to the whole foreground
  process group) reaches only fedcore, whose stop still needs the server, and not the server;
* every process running through such a server holds a shared ``flock`` on
  ``PREFECT_HOME/temporary-servers.lock``; a process that can take it exclusively is the only
  one using that database, so a ``gpu`` tag limit found there is dropped with its slots.

fedcore sets no ``gpu`` limit on a server of its own: with as many slots as cells run at once,
each cell waited 1-2 s for the slot its predecessor on the worker was releasing
(``benchmarks/prefect_handoff.py``), and GPU seats are kept by device locks
(``fedcore.runtime_env.devices``). Older fedcore versions set one; it is dropped here.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedcore.flows.runners import GPU_TAG, is_ephemeral

LOCK_NAME = "temporary-servers.lock"
MIN_FREE_MB = 64  # free space PREFECT_HOME needs for the temporary server's database and logs
PR_SET_PDEATHSIG = 1
_owned: list[str] = []  # API URL of the temporary server this process runs through


def owns_server() -> bool:
    """Whether this process runs through a temporary server it started (and owns its limits)."""
    return bool(_owned)


# The server's entry point: ask the kernel for SIGKILL when the parent dies (Linux prctl
# PR_SET_PDEATHSIG; strictly, when the thread that started it ends, so prefect_api is entered
# from the main thread), leave if the parent is already gone, then run uvicorn as
# ``python -m uvicorn`` would. Done in the child itself, so no preexec_fn runs after fork.
BOOT = f"""
import ctypes, os, runpy, signal, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL)
if os.getppid() != parent:
    sys.exit(1)
sys.argv = ["uvicorn", *sys.argv[2:]]
runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)
"""


def _server_class() -> type:
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    class TemporaryServer(SubprocessASGIServer):
        """Prefect's temporary server (same uvicorn command line) that dies with this process."""

        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            import prefect

            env = {
                **os.environ,
                "PREFECT_UI_ENABLED": "0",
                "PREFECT__SERVER_EPHEMERAL": "1",
                "PREFECT__SERVER_FINAL": "1",
                **get_current_settings().to_environment_variables(exclude_unset=True),
            }
            return subprocess.Popen(
                [
                    sys.executable, "-c", BOOT, str(os.getpid()),
                    "--app-dir", str(prefect.__module_path__.parent),
                    "--factory", "prefect.server.api.server:create_app",
                    "--host", "127.0.0.1", "--port", str(self.port),
                    "--log-level", "error", "--lifespan", "on",
                ],
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C goes to fedcore, which stops it
            )

    return TemporaryServer


def check_home(home: Path) -> None:
    """One line (a ``ConfigError``) when PREFECT_HOME cannot be made, written or holds less
    than ``MIN_FREE_MB`` MB free: the temporary server would fail with thousands of lines
    that do not name the cause."""
    import shutil

    from fedcore.core.config import ConfigError

    fix = "free space there or set PREFECT_HOME to another folder"
    try:
        home.mkdir(parents=True, exist_ok=True)
        free_mb = shutil.disk_usage(home).free // 2**20
        if free_mb < MIN_FREE_MB:
            raise ConfigError(f"PREFECT_HOME {home}: {free_mb} MB free, Prefect's temporary "
                              f"server needs {MIN_FREE_MB} MB; {fix}")
        probe = home / f".fedcore-write-probe-{os.getpid()}"
        try:
            probe.write_bytes(bytes(65536))
        finally:
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(f"PREFECT_HOME {home}: cannot write ({exc.strerror or exc}); {fix}") \
            from None


def _hold_home_lock() -> tuple[int, bool]:
    """A shared flock on PREFECT_HOME's lock file, and whether no other process held one."""
    from prefect.settings import PREFECT_HOME

    home = Path(PREFECT_HOME.value())
    check_home(home)
    fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        sole = True
    except BlockingIOError:
        sole = False
    fcntl.flock(fd, fcntl.LOCK_SH)  # kept (downgraded) until this process is done or dies
    return fd, sole


def reclaim_gpu_slots() -> None:
    """Drop the ``gpu`` tag limit with whatever slots it holds (the module docstring)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.delete_concurrency_limit_by_tag(GPU_TAG)
        except ObjectNotFound:
            pass


def _drain_workers() -> None:
    """Send Prefect's queued logs and events while the server still listens."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=5)


@contextmanager
def prefect_api(
    starting: Callable[[str | None], None] | None = None,
) -> Iterator[str | None]:
    """Run the body against the configured Prefect server, or else a temporary one started
    here that dies with this process; yields the temporary server's API URL (None if none).

    ``starting`` is called with that URL (None: the configured server) before the temporary
    server starts, so that work which needs the URL (a sweep's Dask workers) starts alongside
    the server's seconds of start-up."""
    if not is_ephemeral():
        if starting is not None:
            starting(None)
        yield None
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    fd, sole = _hold_home_lock()
    server = _server_class()()
    previous = os.environ.get("PREFECT_API_URL")
    try:
        if starting is not None:
            server.port = server.port or server.find_available_port()  # start() keeps it
            starting(server.api_url.rstrip("/"))
        server.start()
        os.environ["PREFECT_API_URL"] = server.api_url
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            if sole:
                reclaim_gpu_slots()
            _owned.append(server.api_url)
            try:
                yield server.api_url
            finally:
                _owned.remove(server.api_url)
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous
        _drain_workers()
        server.stop()
        os.close(fd)


def prepare_database() -> None:
    """Create or migrate the Prefect database under ``PREFECT_HOME`` now, as ``prefect server
    database upgrade -y`` does, so that a new checkout's first temporary server starts without
    migrating it (about 5 s of CPU, in the first sweep's own time otherwise); scripts/setup.sh
    runs it where the database is missing. Nothing to do against a configured server."""
    if not is_ephemeral():
        return
    import asyncio

    from prefect.server.database import provide_database_interface

    asyncio.run(provide_database_interface().run_migrations_upgrade())


if __name__ == "__main__":
    prepare_database()
