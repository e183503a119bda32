"""Checkpoint files of a run's folder: written atomically and signed, pruned, loaded, checked
against the run they would resume, removed."""

from __future__ import annotations

import hmac
import logging
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import torch

from fedcore.core.config import ExperimentConfig, project_root
from fedcore.core.config.limits import shown
from fedcore.core.round import code_digest
from fedcore.core.round.checkpoint.codec import decode, encode
from fedcore.core.round.checkpoint.errors import ORIGIN, unusable
from fedcore.core.round.checkpoint.signing import KEY_ENV, KEY_FILE, MAC, digest, key_for
from fedcore.core.runtime import faults

log = logging.getLogger("fedcore")
FORMAT = 1
KEEP = 2  # newest files kept per run folder
_NAME = re.compile(r"^round-(\d+)\.pt$")


def run_folder(cfg: ExperimentConfig) -> Path:
    """``<checkpoint_dir>/<config_hash>``; a relative checkpoint_dir is under the project root."""
    base = Path(cfg.checkpoint_dir).expanduser()
    if not base.is_absolute():
        base = project_root() / base
    return base / cfg.config_hash()


def checkpoint_files(folder: Path) -> list[Path]:
    """Complete checkpoint files in ``folder``, oldest first (none if it is gone)."""
    try:
        names = list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [(int(m.group(1)), p) for p in names if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def save(state: dict[str, Any], folder: Path, round: int, keep: int = KEEP,
         code: str | None = None, key: bytes | None = None) -> Path:
    """Write ``round-<round>.pt`` atomically (temporary file, fsync, rename); ``prune``.

    ``code``: the run's code digest (``fedcore.core.round.code_digest.of_config``; None:
    fedcore's). ``key``: the HMAC key (None: ``key_for`` of ``folder.parent``). A failed write
    leaves no temporary file; a full disk raises ``OSError(ENOSPC)`` naming the checkpoint (``no
    space left on device writing checkpoint <path>``). A folder deleted meanwhile (an identical run
    that finished) is made again."""
    path = folder / f"round-{round:06d}.pt"
    tmp = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    payload = {"format": FORMAT, **encode(state), "code_digest": code or code_digest.current()}
    try:
        payload[MAC] = digest(payload, key if key is not None else key_for(folder.parent))
    except OSError as exc:  # the key file is written first on a new store
        if faults.is_disk_full(exc):
            raise faults.no_space(f"checkpoint {path}") from None
        raise
    for attempt in range(3):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                torch.save(payload, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            break
        except FileNotFoundError:  # the folder went away meanwhile: make it again
            tmp.unlink(missing_ok=True)
            if attempt == 2:
                raise
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # no partial file is left, whatever went wrong
            if faults.is_disk_full(exc):  # torch says "unexpected pos ..." for a short write
                raise faults.no_space(f"checkpoint {path}") from None
            raise
    prune(folder, round, keep)
    return path


def prune(folder: Path, round: int, keep: int = KEEP) -> None:
    """After ``round-<round>.pt`` was written: delete the files of later rounds (left by an
    earlier run of this config that did not resume, e.g. a retried trial: pruning by round
    number alone deleted the file just written, whose upload then failed) and all but the
    newest ``keep`` of the others, so the file just written is always kept."""
    files = checkpoint_files(folder)
    later = [p for p in files if _round(p) > round]
    for old in later + [p for p in files if _round(p) <= round][:-keep]:
        old.unlink(missing_ok=True)


def _round(path: Path) -> int:
    """The round of a checkpoint file's name (``round-000012.pt`` -> 12)."""
    match = _NAME.match(path.name)
    assert match is not None  # checkpoint_files lists only such names
    return int(match.group(1))


def load(
    path: Path,
    map_location: str | torch.device | None = None,
    origin: str | None = None,
    remedy: str | None = None,
    key: bytes | None = None,
) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (no code runs) and undo ``encode``.

    The state gets ``ORIGIN``: ``origin`` (default: the path) and ``remedy``, how to start
    afresh instead (default: delete the run's checkpoint folder), for ``unusable``.
    A file whose ``hmac`` is missing (whatever its ``code_digest``: a plugin run's too) or does
    not match its contents under ``key`` (None: ``key_for`` of the folder above the file's;
    edited, corrupted or forged since it was written, or written under another key) raises
    ``CheckpointError``.
    """
    if map_location is None and not torch.cuda.is_available():
        map_location = "cpu"
    where = {
        "file": origin or str(path),
        "remedy": remedy or f"delete the folder {Path(path).parent} and rerun from round 1",
    }
    try:  # no symbolic link followed, a FIFO not waited on (it hung `run`, deaf to SIGTERM)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise unusable({ORIGIN: where}, f"it cannot be opened as a plain file "
                       f"({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise unusable({ORIGIN: where}, "it is not a regular file")
        raw = torch.load(fh, map_location=map_location, weights_only=True)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise unusable({ORIGIN: where}, f"unknown format {shown(found)}")
    written = raw.pop(MAC, None)
    raw.pop("digest", None)  # the plain SHA-256 of older files proves nothing
    if not isinstance(written, str):  # whatever code wrote it: no file resumes unsigned
        raise unusable({ORIGIN: where}, "it carries no HMAC signature (unsigned files are "
                       "not trusted, whichever code wrote them)")
    key = key if key is not None else key_for(Path(path).parent.parent)
    if not hmac.compare_digest(written, digest(raw, key)):
        raise unusable({ORIGIN: where}, f"its HMAC does not match (edited, corrupted or "
                       f"forged, or written under another key; the key is {KEY_ENV} or "
                       f"{KEY_FILE} in checkpoint_dir)")
    state: dict[str, Any] = decode(raw)
    state[ORIGIN] = where
    return state


def check_state(
    state: dict[str, Any], rounds: int, eval_every: int, params: torch.Tensor,
    buffers: dict[str, torch.Tensor],
) -> str | None:
    """What makes ``state`` (a loaded ``Simulation.state_dict``) impossible for a run of
    ``rounds`` rounds evaluated every ``eval_every`` with these ``params`` and ``buffers``, or
    None. The history holds rounds 1..round; per-client tables the evaluated ones."""
    r = state["round"]
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= rounds:
        return f"its round {shown(r)} is not in 0..{rounds} (rounds={rounds})"
    history = state["history"]
    got = [h.get("round") if isinstance(h, dict) else None for h in history] if isinstance(
        history, list) else None
    if got != list(range(1, r + 1)):
        return f"its history does not hold rounds 1..{r} once each (got {shown(got)})"
    evaluated = [i for i in range(1, r + 1) if i % eval_every == 0 or i == rounds]
    tables = [t.get("round") if isinstance(t, dict) else None for t in state["client_tables"]]
    if tables != evaluated:
        return f"its per-client tables are of rounds {shown(tables)}, not {shown(evaluated)}"
    for key in ("bytes_up_total", "bytes_down_total"):
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"its {key} is {shown(value)}, not a count of bytes"
    p = state["params"]
    if not isinstance(p, torch.Tensor) or p.shape != params.shape or p.dtype != params.dtype:
        got_p = f"{p.dtype} {tuple(p.shape)}" if isinstance(p, torch.Tensor) else type(p).__name__
        return (f"its params are {got_p}, this run's model has {params.dtype} "
                f"{tuple(params.shape)}")
    b = state["buffers"]
    if not isinstance(b, dict) or sorted(b) != sorted(buffers) or any(
        not isinstance(b[k], torch.Tensor) or b[k].shape != v.shape for k, v in buffers.items()
    ):
        return "its model buffers (batch-norm statistics) do not match this run's model"
    return None


def same_code(state: dict[str, Any], code: str | None = None) -> bool:
    """Whether a loaded checkpoint was written by this code (digest ``code``, None: fedcore's)."""
    return state.get("code_digest") == (code or code_digest.current())


def latest(folder: Path, code: str | None = None) -> dict[str, Any] | None:
    """The newest checkpoint in ``folder`` that loads and was written by this code (an
    unreadable one falls back to older). Files of other code are deleted with one log line:
    the run starts fresh instead of continuing another version's state (and its new files
    are not pruned in favour of the old ones' higher rounds)."""
    stale = []
    found = None
    for path in reversed(checkpoint_files(folder)):
        try:
            state = load(path)
        except Exception as exc:  # noqa: BLE001  (e.g. a truncated file: try the previous one)
            log.warning("checkpoint %s does not load (%s); trying an older one", path, exc)
            continue
        if same_code(state, code):
            found = state
            break
        stale.append((path, state.get("code_digest", "none")))
    if stale:
        log.warning("not resuming %s: written by other code (code digest %s, this code %s); "
                    "deleted", ", ".join(p.name for p, _ in stale), stale[0][1],
                    code or code_digest.current())
        for path, _ in stale:
            path.unlink(missing_ok=True)
    return found


def remove(folder: Path) -> None:
    """Delete a run's checkpoint folder (after the run finished)."""
    shutil.rmtree(folder, ignore_errors=True)
