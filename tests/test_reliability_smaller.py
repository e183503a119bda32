"""The smaller items of issue 39 (docs/explanation/reliability.md): a full PREFECT_HOME, a
report on a full disk, a plugin that calls ``sys.exit()`` at import, a sweep file's ``base``
naming a file that is no config, and an Optuna storage in a folder that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.cli import main
from fedcore.core.config import project_root
from tests.test_reliability_disk import fill, small_disk  # noqa: F401  (a fixture)

SWEEP = """
name: tiny
set: {rounds: 1, model.name: mlp, dataset.num_clients: 4, clients_per_round: 2}
grid: {seed: [0]}
"""


def test_a_full_prefect_home_is_one_line_naming_it(capfd, tracking, tmp_path, monkeypatch,
                                                   small_disk):  # noqa: F811
    import os
    import subprocess
    import sys

    fill(small_disk)
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(SWEEP)
    # a fresh process, as a user meets it (this one may hold another test's Prefect settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(small_disk / "prefect")
    done = subprocess.run([sys.executable, "-m", "fedcore", "sweep", str(sweep)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr.strip()
    assert err.startswith(f"fedcore: error: PREFECT_HOME {small_disk / 'prefect'}: ")
    assert "\n" not in err and err.endswith("free space there or set PREFECT_HOME to another "
                                            "folder"), err


def test_a_report_on_a_full_disk_names_the_file_and_keeps_the_previous_report(
    tracking, tmp_path, small_disk  # noqa: F811
):
    """``report`` on a full disk named no file and left half a report."""
    import errno

    from fedcore.flows.sweep import parent_run
    from fedcore.specs.sweep import load_sweep
    from fedcore.tracking.report import build_report
    from fedcore.tracking.runner import run_tracked

    path = tmp_path / "tiny.yaml"
    path.write_text(SWEEP)
    spec = load_sweep(path)
    parent = parent_run(spec)
    for cell in spec.cells:
        run_tracked(cell.config, parent_run_id=parent, tags={"sweep": spec.name})
    out = small_disk / "report"
    first = build_report(spec, out)
    before = {f.name: f.read_bytes() for f in first.files}
    (out / "table.md").write_text("the previous report\n")
    before["table.md"] = b"the previous report\n"
    fill(small_disk)
    with pytest.raises(OSError) as e:
        build_report(spec, out)
    assert e.value.errno == errno.ENOSPC
    assert str(e.value).startswith(f"[Errno 28] no space left on device writing report file "
                                   f"{out}/"), str(e.value)
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before  # no half report
    new = small_disk / "new"
    with pytest.raises(OSError, match=f"no space left on device writing report file {new}/"):
        build_report(spec, new)
    assert not new.exists() or not any(new.iterdir())
    assert sorted(p.name for p in small_disk.iterdir() if p.name != "new") == [
        "ballast", "ballast2", "report"]  # no temporary folder left


def test_a_sqlite_store_in_a_missing_folder_outside_the_project_is_refused(
    capsys, tracking, tmp_path, monkeypatch
):
    """``storage=sqlite:////nonexistent/...`` created folders at the file system's root."""
    missing = tmp_path / "nonexistent"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{missing / 'sub' / 'mlflow.db'}")
    assert main(["run", "rounds=1", "model.name=mlp", "dataset.num_clients=4",
                 "clients_per_round=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"fedcore: error: tracking_uri: the folder {missing / 'sub'} of SQLite "
                   "database mlflow.db does not exist; create it first (fedcore makes missing "
                   f"folders only under the project folder {project_root().resolve()}, or one "
                   "inside an existing folder other than /)"), err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["tune", "configs/studies/fedavg_lr.yaml", "n_trials=1",
                 f"storage=sqlite:///{missing / 'sub' / 'optuna.db'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedcore: error: study.storage: the folder {missing / 'sub'} of SQLite "
                          "database optuna.db does not exist"), err
    assert not missing.exists()
    from fedcore.core.config import ConfigError
    from fedcore.tracking.store_setup import sqlite_folder

    with pytest.raises(ConfigError, match="^study.storage: the folder /nonexistent_fedcore_x of"):
        sqlite_folder(Path("/nonexistent_fedcore_x/optuna.db"), "study.storage")
    assert not Path("/nonexistent_fedcore_x").exists()
    sqlite_folder(tmp_path / "one" / "mlflow.db", "tracking_uri")  # one level: made
    assert (tmp_path / "one").is_dir()
