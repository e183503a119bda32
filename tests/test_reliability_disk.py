"""A full disk (docs/explanation/reliability.md): the MLflow store or a checkpoint filling mid-run
ends the run with one line naming the cause and the path, no traceback, and no partial file. Uses a
real, tiny tmpfs (needs root to mount; skipped elsewhere)."""

from __future__ import annotations

import errno
import re
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest
import torch

from fedcore.cli import main
from fedcore.cli.failures import failure_line
from fedcore.cli.run import ProgressBar
from fedcore.core.round import checkpoint
from tests.conftest import TINY


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MB tmpfs at ``tmp_path/disk``, unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> None:
    """Write ``disk/ballast`` until the file system is full."""
    with open(disk / "ballast", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(bytes(65536))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with open(disk / "ballast2", "wb", buffering=0) as fh:  # the last partial block
        try:
            while True:
                fh.write(bytes(512))
        except OSError:
            pass


def _error_lines(err: str) -> list[str]:
    """stderr without the progress bar and MLflow's start-up INFO lines."""
    lines = [ln for part in err.splitlines() for ln in part.split("\r")]
    return [ln for ln in lines if ln.strip() and "round/s" not in ln and "s/round" not in ln
            and "%|" not in ln and " INFO " not in ln]


def test_store_filling_mid_run_is_one_line(capfd, monkeypatch, tmp_path, small_disk):
    db = small_disk / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("FEDCORE_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    on_round_end = ProgressBar.on_round_end

    def full_after_round_1(self, record):  # metrics are written in batches:
        # the store meets the full disk a round or two later, never after the last round
        on_round_end(self, record)
        if record.round == 1:
            fill(small_disk)

    monkeypatch.setattr(ProgressBar, "on_round_end", full_after_round_1)
    from fedcore.tracking import load_settings, mlflow_tracker

    monkeypatch.setattr(mlflow_tracker, "METRICS_EVERY_S", 0.0)  # each round handed over
    from fedcore.tracking.mlflow_tracker import mlflow_client

    mlflow_client(load_settings())  # the store's schema, then no free page left inside it:
    with closing(sqlite3.connect(db, isolation_level=None)) as con:  # each round must grow it
        con.execute("VACUUM")
    assert main(["run", *TINY, "rounds=6"]) == 1
    err = capfd.readouterr().err
    assert "Traceback" not in err
    lines = _error_lines(err)
    assert len(lines) == 1, lines
    assert re.fullmatch(
        rf"fedcore: error: run \w+ failed after round [1-5]: \[Errno 28\] no space left on "
        rf"device writing the MLflow store {re.escape(str(db))} \(traceback: .*\)", lines[0]
    ), lines[0]


def test_checkpoint_on_a_full_disk_names_the_path_and_leaves_no_tmp(small_disk):
    fill(small_disk)
    folder = small_disk / "run"
    with pytest.raises(OSError) as e:
        checkpoint.save({"params": torch.zeros(100_000)}, folder, 3)
    assert e.value.errno == errno.ENOSPC
    assert str(e.value) == (f"[Errno 28] no space left on device writing checkpoint "
                            f"{folder / 'round-000003.pt'}")
    assert not folder.exists() or list(folder.iterdir()) == []


def test_run_checkpointing_onto_a_full_disk_fails_naming_the_file(small_disk):
    from fedcore.core.compose.configure import load_config
    from fedcore.core.round.simulation import Simulation

    (small_disk / "ckpt").mkdir()
    fill(small_disk)
    cfg = load_config(None, [*TINY, "checkpoint_every=1", f"checkpoint_dir={small_disk}/ckpt"])
    with pytest.raises(OSError) as e:
        Simulation(cfg).run()
    assert failure_line(e.value) == (
        f"OSError: [Errno 28] no space left on device writing checkpoint {small_disk}/ckpt/"
        f"{cfg.config_hash()}/round-000001.pt"
    )
    assert not any(p.name.endswith(".tmp") for p in (small_disk / "ckpt").rglob("*"))
