"""The checkpoint key file (``checkpoint.key`` in ``checkpoint_dir``) is trusted only when it is
a regular file of mode 0600, owned by this user, holding a key of the length fedcore writes: a
planted 0644 file, a symbolic link to a public file, an empty file or a FIFO let whoever made it
forge checkpoints (all were used before). Each is one line naming the file, exit code 2, before
a run is created, and the file's content is never shown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedcore.core.compose.configure import load_config
from fedcore.core.round import checkpoint
from fedcore.core.round.simulation import Simulation
from tests.conftest import TINY

SECRET = "f" * 64  # a planted key: well-formed, so only its mode or owner can betray it


def _planted(base: Path, how: str) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    path = base / checkpoint.KEY_FILE
    if how == "0644":
        path.write_text(SECRET)
        path.chmod(0o644)
    elif how == "symlink":
        public = base / "public.txt"
        public.write_text(SECRET)
        public.chmod(0o600)
        path.symlink_to(public)
    elif how == "empty":
        path.write_text("")
        path.chmod(0o600)
    elif how == "short":
        path.write_text(SECRET[:10])
        path.chmod(0o600)
    elif how == "fifo":
        os.mkfifo(path, 0o600)
    elif how == "folder":
        path.mkdir(mode=0o700)
    return path


PROBLEMS = {
    "0644": "has mode 0644, not 0600",
    "symlink": "is a symbolic link",
    "empty": "does not hold a key of 64 hexadecimal digits (0 bytes read)",
    "short": "does not hold a key of 64 hexadecimal digits (10 bytes read)",
    "fifo": "is not a regular file",
    "folder": "is not a regular file",
}


@pytest.mark.parametrize("how", sorted(PROBLEMS))
def test_an_untrusted_key_file_is_refused_in_one_line(tmp_path, monkeypatch, how):
    monkeypatch.delenv(checkpoint.KEY_ENV, raising=False)
    path = _planted(tmp_path, how)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.key_for(tmp_path)
    msg = str(e.value)
    assert msg == (f"checkpoint key file {path} {PROBLEMS[how]}: it is not trusted; delete it "
                   f"to have a new key made (checkpoints signed with the old one then start "
                   f"afresh) or set {checkpoint.KEY_ENV}")
    assert SECRET[:10] not in msg
    cfg = load_config(None, [*TINY, "checkpoint_every=1", f"checkpoint_dir={tmp_path}"])
    with pytest.raises(checkpoint.CheckpointError, match=PROBLEMS[how].replace("(", r"\(")
                       .replace(")", r"\)")):
        Simulation(cfg)  # before any round, before a tracked run is created


def test_a_new_key_file_is_private_and_accepted_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.delenv(checkpoint.KEY_ENV, raising=False)
    old = os.umask(0o077)
    try:
        key = checkpoint.key_for(tmp_path / "ck")
    finally:
        os.umask(old)
    path = tmp_path / "ck" / checkpoint.KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600 and len(key) == checkpoint.KEY_HEX
    assert checkpoint.key_for(tmp_path / "ck") == key
    checkpoint.check_key(tmp_path / "ck")


def test_fedcore_run_with_a_planted_key_file_creates_no_run(tmp_path):
    """The CLI: one line, exit code 2, no MLflow store made."""
    ck = tmp_path / "ck"
    path = _planted(ck, "0644")
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != checkpoint.KEY_ENV}
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}",
               FEDCORE_ARTIFACT_LOCATION=str(tmp_path / "artifacts"))
    done = subprocess.run(
        [sys.executable, "-m", "fedcore", "run", *TINY, "checkpoint_every=1",
         f"checkpoint_dir={ck}"], env=env, cwd=root, capture_output=True, text=True,
        timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"checkpoint key file {path} has mode 0644" in lines[0], lines
    assert SECRET[:10] not in done.stderr + done.stdout
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]  # no store made
