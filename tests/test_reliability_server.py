"""A tracking server that does not answer (docs/explanation/reliability.md): every command that
uses MLflow says so in one line naming the URI without its password, before any work (``run``
failed after 251 s, ``ui`` and ``report`` printed a 103-line traceback), and MLflow's HTTP
retries are bounded so a server killed mid-run ends the command in seconds."""

from __future__ import annotations

import os
import socket

import pytest

from fedcore.cli import main
from fedcore.tracking import reach
from tests.conftest import TINY


@pytest.fixture
def dead_server(monkeypatch):
    """``MLFLOW_TRACKING_URI`` at a 127.0.0.1 port nothing listens on, with a password."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://alice:s3cret@127.0.0.1:{port}")
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("argv", [
    ["run", *TINY],
    ["sweep", "configs/sweeps/main.yaml"],
    ["report", "configs/sweeps/main.yaml"],
    ["ui"],
    ["tune", "configs/studies/fedavg_lr.yaml"],
])
def test_an_unreachable_tracking_server_is_one_line_before_any_work(
    capsys, dead_server, tmp_path, monkeypatch, argv
):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    assert main([*argv, f"checkpoint_dir={tmp_path / 'ck'}"] if argv[0] == "run" else argv) == 2
    out, err = capsys.readouterr()
    err = err.strip()
    assert err == (f"fedcore: error: MLflow tracking server {dead_server} does not answer "
                   "(Connection refused; 3 tries); start it, or set MLFLOW_TRACKING_URI (or "
                   "tracking_uri in mlflow.yml)"), err
    assert "s3cret" not in out + err and not (tmp_path / "prefect").exists()


def test_mlflow_http_retries_are_bounded_unless_the_user_sets_them(monkeypatch):
    for key in reach.HTTP_DEFAULTS:
        monkeypatch.setenv(key, "placeholder")
        monkeypatch.delenv(key)  # unset, and restored as unset after the test
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    reach.bound_http_retries()
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "5"  # the user's value is kept


def test_a_local_store_is_not_probed():
    reach.check_server("sqlite:////nowhere/mlflow.db")
    reach.check_server("/some/folder")


def test_no_password_in_mlflow_view_run_lines_or_failure_lines(monkeypatch, capsys):
    from fedcore.cli.failures import failure_line
    from fedcore.tracking.run_store import mlflow_client
    from fedcore.tracking.settings import load_settings

    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "x")
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:s3cret@127.0.0.1:9")
    client = mlflow_client(load_settings())
    store = client._tracking_client.store
    run = type("Run", (), {"data": type("D", (), {"tags": {}})(), "info": type(
        "I", (), {"experiment_id": "1", "run_name": "r"})()})()
    monkeypatch.setattr(store, "get_run", lambda run_id: run)
    client._tracking_client._log_url("abc")  # what MLflow prints when a run ends
    assert "s3cret" not in capsys.readouterr().out
    line = failure_line(RuntimeError("API request to http://alice:s3cret@127.0.0.1:9/api/2.0/x "
                                     "failed"))
    assert line == "RuntimeError: API request to http://127.0.0.1:9/api/2.0/x failed"
