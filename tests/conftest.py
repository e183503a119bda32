"""Test session set-up: every MLflow/Prefect write goes to a temporary folder, nothing to ~."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_TMP = Path(tempfile.mkdtemp(prefix="fedcore-tests-"))
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{_TMP / 'mlflow.db'}"
os.environ["FEDCORE_ARTIFACT_LOCATION"] = str(_TMP / "artifacts")
os.environ["PREFECT_HOME"] = str(_TMP / "prefect")
os.environ["MPLCONFIGDIR"] = str(_TMP / "mpl")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server for the whole session (ephemeral, local)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def tracking(monkeypatch, tmp_path):
    """A fresh MLflow SQLite store for one test."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("FEDCORE_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    from fedcore.tracking import load_settings

    return load_settings()


TINY = ["rounds=3", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3"]
