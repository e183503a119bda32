"""Checkpoint files: plain containers of tensors written atomically, read with weights_only=True.

A checkpoint is a ``torch.save`` of dicts, lists, tuples, str/int/float/bool/None and tensors
only; numpy arrays and scalars are stored as tensors tagged ``{"__numpy__": tensor}`` (or plain
Python numbers) and turned back on load. Loading uses ``torch.load(weights_only=True)``, which
executes no code from the file.

Every file records the code digest of the process that wrote it (``code_digest``,
``fedcore.core.round.code_digest``); ``latest`` resumes only a checkpoint of this code and
deletes those of other code, so one run never mixes two versions of the code.

Every file also carries ``hmac``, an HMAC-SHA256 over everything else in it (``digest``)
under a key the user controls (``key_for``: ``FEDCORE_CHECKPOINT_KEY``, else a random key
file ``checkpoint.key``, mode 0600, in ``checkpoint_dir``; ``check_key`` refuses a key file
that is not a regular 0600 file of this user holding a key of the right length), checked on
load whatever code wrote the file: a file unsigned, edited, corrupted or forged (its digest
recomputed) by someone without the key is refused, naming the file. Anyone who can read the key
can forge a checkpoint.
``check_state`` refuses a state inconsistent with the run it would resume (a round beyond
its ``rounds``, a history or per-client tables that do not match the round, parameters or
buffers of another shape).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import random
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.core.component.seeding import GLOBAL_RNG_LOCK
from fedcore.core.config import ConfigError, ExperimentConfig, project_root
from fedcore.core.config.limits import shown
from fedcore.core.round import code_digest
from fedcore.core.runtime import faults

log = logging.getLogger("fedcore")

FORMAT = 1
KEEP = 2  # newest files kept per run folder
_NAME = re.compile(r"^round-(\d+)\.pt$")
_NUMPY = "__numpy__"
KEY_ENV = "FEDCORE_CHECKPOINT_KEY"
KEY_FILE = "checkpoint.key"  # in checkpoint_dir, next to the run folders
KEY_BYTES = 32  # random bytes of a new key file
KEY_HEX = 2 * KEY_BYTES  # the hexadecimal digits it holds
MAC = "hmac"
ORIGIN = "__origin__"  # added on load: where the state came from and how to start afresh


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed: one line naming the file, what it lacks and what
    to do (bad input, exit code 2; raised before any round is played)."""


def unusable(state: dict[str, Any], problem: str) -> CheckpointError:
    """The error for ``state`` (as ``load`` returned it) with ``problem``, e.g. what it
    lacks, naming its file and the way to start afresh."""
    origin = state.get(ORIGIN, {"file": "the checkpoint", "remedy": "delete it and rerun"})
    return CheckpointError(
        f"checkpoint {origin['file']} cannot be resumed: {problem}; {origin['remedy']}"
    )


def encode(obj: Any) -> Any:
    """Numpy arrays/scalars -> tensors/Python numbers, recursively; fails on anything else."""
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, str | bool | int | float):
        return obj
    if isinstance(obj, np.ndarray):
        return {_NUMPY: torch.from_numpy(np.ascontiguousarray(obj)).clone()}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        keys = [k for k in obj if not isinstance(k, str | int)]
        if keys:
            raise TypeError(f"checkpoint: dict key {keys[0]!r} is not a str or int")
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(encode(v) for v in obj)
    raise TypeError(f"checkpoint: cannot store a {type(obj).__name__}")


def decode(obj: Any) -> Any:
    """Inverse of ``encode``."""
    if isinstance(obj, dict):
        if set(obj) == {_NUMPY}:
            return obj[_NUMPY].numpy()
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(decode(v) for v in obj)
    return obj


def digest(obj: Any, key: bytes) -> str:
    """HMAC-SHA256 under ``key`` over an encoded state: its structure, every key, number and
    string, and every tensor's dtype, shape and bytes."""
    h = hmac.new(key, digestmod=hashlib.sha256)
    _feed(h, obj)
    return h.hexdigest()


def key_for(base: Path) -> bytes:
    """The checkpoint key: ``FEDCORE_CHECKPOINT_KEY`` when set (give every machine that resumes
    another's uploaded checkpoint the same one), else the file ``<base>/checkpoint.key``, created
    once with 32 random bytes and mode 0600 (atomically: concurrent runs agree on one key).

    An existing key file is used only when ``check_key`` accepts it."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode()
    path = base / KEY_FILE
    if not os.path.lexists(path):
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".{KEY_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(KEY_BYTES).hex())
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # fails if another process made it first: use that one
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    return _read_key(path)


def check_key(base: Path) -> None:
    """Refuse, in one line, a key file ``<base>/checkpoint.key`` that is not a regular file of
    mode 0600 owned by this user holding a key of the length fedcore writes (a planted, public,
    linked or empty file would let whoever made it forge checkpoints); nothing when
    ``FEDCORE_CHECKPOINT_KEY`` is set or no key file exists yet."""
    path = base / KEY_FILE
    if not os.environ.get(KEY_ENV) and os.path.lexists(path):
        _read_key(path)


def _read_key(path: Path) -> bytes:
    """The key in ``path``, read only after ``check_key``'s conditions hold on the opened
    file itself (no symbolic link followed, a FIFO not waited on); its content is never shown."""
    def refused(problem: str) -> CheckpointError:
        return CheckpointError(
            f"checkpoint key file {path} {problem}: it is not trusted; delete it to have a new "
            f"key made (checkpoints signed with the old one then start afresh) or set {KEY_ENV}")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if os.path.islink(path):
            raise refused("is a symbolic link") from None
        raise refused(f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refused("is not a regular file")
        if st.st_uid != os.getuid():
            raise refused(f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})")
        if stat.S_IMODE(st.st_mode) != 0o600:
            raise refused(f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0600")
        raw = os.read(fd, 2 * KEY_HEX)
    finally:
        os.close(fd)
    key = raw.strip()
    if len(key) != KEY_HEX or not all(c in b"0123456789abcdefABCDEF" for c in key):
        raise refused(f"does not hold a key of {KEY_HEX} hexadecimal digits "
                      f"({len(raw)} bytes read)")
    return key


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(obj.shape)}:".encode())
        h.update(t.view(torch.uint8).numpy().data)
    elif isinstance(obj, dict):
        h.update(f"D{len(obj)}:".encode())
        for key, value in obj.items():
            _feed(h, key)
            _feed(h, value)
    elif isinstance(obj, list | tuple):
        h.update(f"{type(obj).__name__}{len(obj)}:".encode())
        for value in obj:
            _feed(h, value)
    elif obj is None or isinstance(obj, str | bool | int | float):
        text = repr(obj)
        h.update(f"{type(obj).__name__}{len(text)}:{text}".encode("utf-8", "surrogatepass"))
    else:
        raise TypeError(f"checkpoint: cannot digest a {type(obj).__name__}")


def rng_state() -> dict[str, Any]:
    """Every global generator: torch CPU and CUDA, numpy's legacy global, Python's ``random``."""
    with GLOBAL_RNG_LOCK:
        state = np.random.get_state(legacy=True)
        assert isinstance(state, tuple)  # the legacy form: (kind, keys, pos, has_gauss, gauss)
        kind, keys, pos, has_gauss, gauss = state
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
            "python": random.getstate(),
        }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore ``rng_state`` (CUDA only onto as many devices as were saved)."""
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    version, internal, gauss_next = state["python"]
    with GLOBAL_RNG_LOCK:
        torch.set_rng_state(state["torch"].cpu())
        cuda = state["cuda"]
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
        np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
        random.setstate((version, tuple(internal), gauss_next))


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
