"""What produced a run: code (git commit, dirty flag, version), libraries, host, user, Prefect.

The tags use MLflow's standard names where there is one (``mlflow.source.*``, ``mlflow.user``),
so the UI's "Source", "Version" and "Created by" columns are filled. ``mlflow.source.*`` name
the entry point: for fedcore's own commands (and tools such as pytest or a Prefect worker) the
fedcore source tree and its commit; for a user's script calling fedcore as a library
(``python train.py``), that script and the commit of the git repository holding it (no commit
when there is none). fedcore's own commit is always in ``fedcore.git.commit``.
"""

from __future__ import annotations

import functools
import getpass
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fedcore
from fedcore.core.round import code_digest
from fedcore.tracking.environment import environment_tags

CODE_DIGEST_TAG = "fedcore.code_digest"
COMMIT_TAG = "mlflow.source.git.commit"
BRANCH_TAG = "mlflow.source.git.branch"
FEDCORE_COMMIT_TAG = "fedcore.git.commit"
NO_COMMIT = "none"  # fedcore runs from an installed wheel, not a git checkout
DIRTY_TAG = "fedcore.git.dirty"
SOURCE_TREE = Path(fedcore.__file__).resolve().parent.parent  # the checkout fedcore runs from


def _git(*args: str, folder: Path = SOURCE_TREE) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def entry_script() -> Path | None:
    """The user's script this process runs (``python train.py``); None for fedcore's own
    modules, a program installed in this Python (``fedcore``, ``pytest``, a Prefect or Dask
    worker), ``python -c`` and an interactive session."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return None
    script = Path(path).resolve()
    if script.suffix != ".py" or not script.is_file():
        return None
    own = [SOURCE_TREE / "fedcore", SOURCE_TREE / "flows"]
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    if any(script.is_relative_to(folder) for folder in [*own, *installed]):
        return None
    return script


def _script_source(script: Path) -> dict[str, str]:
    """``mlflow.source.*`` of a user's script: its path, and its repository's commit and
    branch when it is in a git repository."""
    tags = {"mlflow.source.name": str(script)}
    commit = _git("rev-parse", "HEAD", folder=script.parent)
    if commit:
        tags[COMMIT_TAG] = commit
        branch = _git("rev-parse", "--abbrev-ref", "HEAD", folder=script.parent)
        if branch and branch != "HEAD":
            tags[BRANCH_TAG] = branch
    return tags


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, str]:
    """Commit, branch and dirty flag of the fedcore source tree (empty outside a git checkout).

    Read once per process; "dirty" counts modified tracked files, not untracked ones.
    """
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return {}
    status = _git("status", "--porcelain", "--untracked-files=no", "--", "fedcore", "flows",
                  "configs", "pyproject.toml")
    state = {COMMIT_TAG: commit, FEDCORE_COMMIT_TAG: commit,
             DIRTY_TAG: "unknown" if status is None else str(bool(status)).lower()}
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":
        state[BRANCH_TAG] = branch
    return state


def code_label(tags: dict[str, str]) -> str:
    """Which code made a run, from its tags: ``commit abc1234, dirty`` (fedcore's commit;
    ``no git commit`` outside a checkout; ``no code digest`` for a run recorded before digests
    existed)."""
    commit = tags.get(FEDCORE_COMMIT_TAG, tags.get(COMMIT_TAG))  # older runs: only the latter
    commit = None if commit == NO_COMMIT else commit
    label = f"commit {commit[:7]}" if commit else "no git commit"
    if tags.get(DIRTY_TAG) == "true":
        label += ", dirty"
    if not tags.get(CODE_DIGEST_TAG):
        label += ", no code digest"
    for key in sorted(tags):  # out-of-tree packages: `` + mypkg files 1a2b3c4d5e6f``
        if key.startswith("fedcore.plugin.") and key.endswith(".files_digest"):
            label += f" + {key[len('fedcore.plugin.'):-len('.files_digest')]} files {tags[key]}"
    return label


def current_code_label() -> str:
    """``code_label`` of this process's code, with its digest."""
    digest = code_digest.current()
    return f"code {digest} ({code_label({**git_state(), CODE_DIGEST_TAG: digest})})"


def fedcore_version() -> str:
    return fedcore.__version__


def prefect_flow_run_id() -> str | None:
    """The Prefect flow run this code runs in (flow, task or Dask worker), else None.

    Looked up only when Prefect is already imported: a plain ``fedcore run`` never loads it.
    """
    if "prefect" not in sys.modules:
        return None
    try:
        from prefect.runtime import flow_run

        run_id = flow_run.id
    except Exception:  # noqa: BLE001  (no Prefect context)
        return None
    return str(run_id) if run_id else None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def _static_tags() -> dict[str, str]:
    import torch

    script = entry_script()
    fedcore_git = {FEDCORE_COMMIT_TAG: NO_COMMIT, **git_state()}
    if script is None:
        source = {**fedcore_git, "mlflow.source.name": str(SOURCE_TREE)}
    else:  # a user's script: the source is theirs, fedcore's commit stays in its own tag
        source = {**{k: v for k, v in fedcore_git.items() if k not in (COMMIT_TAG, BRANCH_TAG)},
                  **_script_source(script)}
    tags = {
        **source,
        "mlflow.source.type": "LOCAL",
        "mlflow.user": _user(),
        "fedcore.version": fedcore_version(),
        "fedcore.torch_version": str(torch.__version__),  # a plain str (TorchVersion is torch's)
        "fedcore.cuda_version": torch.version.cuda or "none",
        "fedcore.python_version": sys.version.split()[0],
        "fedcore.host": socket.gethostname(),
        **environment_tags(SOURCE_TREE / "requirements" / "lock.txt"),
    }
    return tags


def provenance_tags(method: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Tags recording the code, libraries, host, user and Prefect flow run behind a run.

    With the run's resolved ``method``, the code digest covers the packages outside fedcore
    its components come from, and ``fedcore.plugins``/``fedcore.plugin.<package>.*`` name them
    (``fedcore.core.compose.plugins.tags``)."""
    tags = {**_static_tags(), CODE_DIGEST_TAG: code_digest.current()}
    if method is not None:
        from fedcore.core.compose.plugins import tags as plugin_tags

        tags.update(plugin_tags(method))
        tags[CODE_DIGEST_TAG] = code_digest.of_method(method)
    flow_run_id = prefect_flow_run_id()
    if flow_run_id:
        tags["fedcore.prefect_flow_run_id"] = flow_run_id
        tags["mlflow.source.type"] = "JOB"
    return tags


def device_tags(device: object) -> dict[str, str]:
    """The device a run trained on, with the GPU's name when it is one."""
    tags = {"device": str(device)}
    if str(device).startswith("cuda"):
        import torch

        tags["fedcore.device_name"] = torch.cuda.get_device_name(torch.device(str(device)))
    return tags
