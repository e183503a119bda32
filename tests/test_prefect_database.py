"""``prepare_database`` (run by scripts/setup.sh): Prefect's database made before any sweep."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # a Prefect import and its migrations in a subprocess


def test_setup_makes_prefects_database_at_its_newest_revision(tmp_path: Path) -> None:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    subprocess.run([sys.executable, "-m", "fedcore.flows.server"], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=300)
    db = tmp_path / "prefect" / "prefect.db"
    with sqlite3.connect(db) as con:
        (version,) = con.execute("SELECT version_num FROM alembic_version").fetchone()
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    assert len(version) == 12  # an alembic revision: the migrations ran
    assert {"flow_run", "task_run"} <= tables


def test_nothing_is_made_against_a_configured_server(tmp_path: Path) -> None:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_API_URL": "http://127.0.0.1:9/api"}
    subprocess.run([sys.executable, "-m", "fedcore.flows.server"], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=300)
    assert not (tmp_path / "prefect" / "prefect.db").exists()
