"""The checkpoint key (environment or a 0600 key file) and the HMAC-SHA256 over a state."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import threading
from pathlib import Path
from typing import Any

import torch

from fedcore.core.round.checkpoint.errors import CheckpointError

KEY_ENV = "FEDCORE_CHECKPOINT_KEY"
KEY_FILE = "checkpoint.key"  # in checkpoint_dir, next to the run folders
KEY_BYTES = 32  # random bytes of a new key file
KEY_HEX = 2 * KEY_BYTES  # the hexadecimal digits it holds
MAC = "hmac"


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
    """Feed ``obj``'s structure, keys and values (tensors' dtype, shape and bytes) to ``h``."""
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
