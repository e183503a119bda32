"""Test session set-up: every MLflow/Prefect write goes to a temporary folder, nothing to ~."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_TMP = Path(tempfile.mkdtemp(prefix="fedcore-tests-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)  # removed when the session ends
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{_TMP / 'mlflow.db'}"
os.environ["FEDCORE_ARTIFACT_LOCATION"] = str(_TMP / "artifacts")
os.environ["PREFECT_HOME"] = str(_TMP / "prefect")
os.environ["MPLCONFIGDIR"] = str(_TMP / "mpl")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
os.environ["FEDCORE_STORE_HELPER"] = "0"  # no schema helper process (tests/test_store_setup.py)
os.environ["FEDCORE_FIGURE_HELPER"] = "0"  # figures drawn in-process (tests/test_figure_helper.py)
# one intra-op thread, here and in every subprocess the tests start: the tiny models gain
# nothing from two, and idle OpenMP threads spin on a busy machine (about 30x the CPU time
# of a 3-round run). Set before torch is imported; an explicit setting is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server for the whole session (ephemeral, local)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory):
    """An empty MLflow SQLite store with its schema made, once per test process: making a
    new store's schema (MLflow's migrations) takes 2-4 s, copying this file milliseconds."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("migrated-store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tracking(request, monkeypatch, tmp_path):
    """A fresh MLflow SQLite store for one test: a copy of the migrated empty store, or no file
    at all for tests marked ``new_store`` (they check that nothing creates one, or how fedcore
    creates one)."""
    if request.node.get_closest_marker("new_store") is None:
        shutil.copyfile(request.getfixturevalue("migrated_store"), tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("FEDCORE_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    from fedcore.tracking import load_settings

    return load_settings()


TINY = ["rounds=3", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3"]


# Whole files of end-to-end tests (subprocesses, SIGKILL, MLflow stores and servers, Prefect):
# the fast tier (`pytest -m "not slow"`) leaves them to the full run.
SLOW_FILES = {
    "test_reliability_kill.py", "test_reliability_store.py", "test_tracking_speed.py",
    "test_provenance.py", "test_tune_best.py", "test_flow_provenance.py",
    "test_reliability_stop.py", "test_reliability_smaller.py",
}
SLOW_TESTS = {
    "test_tracked_claims_are_one_parent_run_with_the_table", "test_prefect_flow_claims",
    "test_ui_serves_the_project_store_and_prints_the_training_view_link",
    "test_report_shows_personal_columns_for_ditto_only_and_marks_tuned_rows",
    "test_sweep_on_threads_and_dask_reruns_cells_after_the_rule_changes",
}


# Files whose module-scoped fixture is expensive (servers, a wheel build, a plugin site): under
# `pytest -n 2 --dist loadgroup` (run-tests.sh) each runs on one worker, so it is built once.
ONE_WORKER_FILES = {"test_deployments.py", "test_packaging.py", "test_plugins.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or item.originalname in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        if item.path.name in ONE_WORKER_FILES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
