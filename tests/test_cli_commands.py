"""`fedcore --version`, `python -m fedcore`, the help texts and `fedcore ui`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import fedcore

ROOT = Path(__file__).resolve().parent.parent


def _python(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedcore", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


def test_version_and_python_m_fedcore():
    done = _python("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"fedcore {fedcore.__version__}"


def test_help_lists_every_command_and_run_lists_keys_and_methods():
    from fedcore.cli.run import config_keys
    from fedcore.core.callbacks.configured import REGISTRY as CALLBACKS
    from fedcore.core.config import method_names
    from fedcore.core.samplers.base import REGISTRY as SAMPLERS
    from fedcore.core.stages.base import REGISTRY as STAGES

    top = _python("--help").stdout
    for command in ("run", "sweep", "report", "tune", "ui"):
        assert f"\n    {command} " in top, command
    raw_help = _python("run", "--help").stdout
    run_help = " ".join(raw_help.split())
    for key in config_keys():
        assert key in run_help, key
    for method in method_names():
        assert method in run_help, method
    for title, registry in (("stages", STAGES), ("samplers", SAMPLERS),
                            ("callbacks", CALLBACKS)):
        block = raw_help.split(f"\n{title} (")[1].split("\n\n")[0].split("\n", 1)[1]
        assert block.replace(",", " ").split() == registry.names(), title
    assert {"dataset.alpha", "local.lr", "method.client.*", "engine.backend"} <= set(config_keys())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_project_store_and_prints_the_training_view_link(tracking, tmp_path):
    from fedcore.core.compose.configure import load_config
    from fedcore.tracking.runner import run_tracked

    run_tracked(load_config(None, ["rounds=1", "model.name=mlp", "dataset.num_clients=6",
                                   "clients_per_round=2"]))
    port = _free_port()
    # the UI serves where ui_url says (the address the runs' links point at)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "FEDCORE_MLFLOW_UI_URL": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedcore", "ui"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        from mlflow.tracking import MlflowClient

        exp = MlflowClient(tracking.tracking_uri).get_experiment_by_name(tracking.experiment)
        link = (f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs"
                "?workflowType=machine_learning")
        assert lines[1].strip() == f"open {link}", lines
        assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.5)
        # the server reads this project's store: the run is there
        body = urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=f'{{"experiment_ids": ["{exp.experiment_id}"]}}'.encode(),
            headers={"Content-Type": "application/json"}), timeout=30).read().decode()
        assert '"method"' in body and "fedavg" in body
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_exit_skips_the_final_garbage_collection_once_registered():
    """Every command registers one exit hook that freezes the heap (benchmarks.overhead: the
    final collection cost 1.3-1.5 s per command); calling main twice registers it once."""
    code = ("import atexit, gc; from fedcore import cli\n"
            "calls = []; freeze = cli._skip_final_collection\n"
            "cli._skip_final_collection = lambda: (calls.append(1), freeze())\n"
            "cli.main(['run', 'rounds=zero']); cli.main(['run', 'rounds=zero'])\n"
            "atexit._run_exitfuncs(); print(len(calls), gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1 True"


def test_overrides_may_follow_the_options_as_run_main_passes_them():
    """`./run-main.sh rounds=5` runs `fedcore sweep main.yaml --runner dask --workers "$(nproc)"
    rounds=5`: the overrides after the options are the sweep's, and a stray option is still
    refused."""
    import pytest

    from fedcore.cli import parse

    args = parse(["sweep", "configs/sweeps/main.yaml", "--runner", "dask", "--workers", "3",
                  "rounds=5", "seed=1"])
    assert args.overrides == ["rounds=5", "seed=1"] and args.workers == 3
    assert parse(["report", "s.yaml", "--latex", "rounds=5"]).overrides == ["rounds=5"]
    with pytest.raises(SystemExit):
        parse(["sweep", "s.yaml", "--workers", "3", "--bogus"])
    with pytest.raises(SystemExit):
        parse(["ui", "rounds=5"])
