"""Process helpers of the tests that signal and kill real subprocesses (Linux /proc)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from fedcore.tracking.store_setup import store_lock


def store_client(tracking_uri: str) -> MlflowClient:
    """A client of a store that a subprocess may be creating right now: it opens the store
    under fedcore's store lock, as fedcore's own processes do, so that it never runs MLflow's
    schema migrations at the same time as theirs (two at once leave a half-migrated schema).
    MLflow's client opens its store when it is made, so it is made under the lock."""
    with store_lock(tracking_uri):
        client = MlflowClient(tracking_uri)
        client.search_experiments()
    return client


@functools.cache
def _migrated_prefect_db() -> Path:
    """A Prefect database with its schema made, once per test process (``prefect server
    database upgrade``): a temporary Prefect server in a new PREFECT_HOME otherwise runs the
    migrations itself, about 10 s of every subprocess sweep of the tests."""
    home = Path(tempfile.mkdtemp(prefix="fedcore-prefect-template-"))
    prefect = Path(sys.executable).parent / "prefect"
    subprocess.run([str(prefect), "server", "database", "upgrade", "-y"], check=True,
                   env={**os.environ, "PREFECT_HOME": str(home)}, capture_output=True,
                   timeout=300)
    return home / "prefect.db"


def prefect_home(folder: Path) -> str:
    """``folder`` as a new PREFECT_HOME whose database is already migrated (a copy of one made
    once per process), for a subprocess that starts its own temporary Prefect server."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated_prefect_db(), folder / "prefect.db")
    return str(folder)


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def outlived(pids: list[int], grace_s: float = 20) -> list[str]:
    """The command lines of ``pids`` still alive after ``grace_s`` (helpers that notice their
    parent's exit, e.g. multiprocessing's resource tracker, take a moment)."""
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:200]
            for p in pids if alive(p)]
