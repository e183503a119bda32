"""Process helpers of the tests that signal and kill real subprocesses (Linux /proc)."""

from __future__ import annotations

import time
from pathlib import Path


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
