"""A `fedcore sweep` killed with SIGKILL mid-cell: its temporary Prefect server dies with it,
and running the same line again finishes every cell, with exactly one FINISHED run per cell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from .processes import alive, children, prefect_home, store_client

CELLS = {"seed": [0, 1, 2]}
FAST = {"model.name": "mlp", "dataset.num_clients": 6, "clients_per_round": 3,
        "local.epochs": 1, "local.steps": 2, "rounds": 20, "eval_every": 1}




def test_killed_sweep_resumes_with_one_finished_run_per_cell(tmp_path):
    sweep_file = tmp_path / "kill.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "kill", "grid": CELLS, "set": FAST}))
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PREFECT_HOME": prefect_home(tmp_path / "prefect"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("PREFECT_API_URL", None)
    line = [sys.executable, "-m", "fedcore.cli", "sweep", str(sweep_file)]
    first = subprocess.Popen(line, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    client = store_client(f"sqlite:///{db}")
    while True:  # wait until a cell's run is recording rounds (it holds the gpu slot)
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.3)
        if not db.exists() or client.get_experiment_by_name("fedcore") is None:
            continue
        exp = client.get_experiment_by_name("fedcore").experiment_id
        running = client.search_runs([exp], "tags.sweep = 'kill' and attributes.status = "
                                     "'RUNNING' and metrics.`train/loss` > -1")
        if running:
            break
    servers = children(first.pid)
    assert servers, "the sweep runs its Prefect server as a child process"
    first.send_signal(signal.SIGKILL)
    first.wait()
    gone = time.monotonic() + 20
    while any(alive(p) for p in servers) and time.monotonic() < gone:
        time.sleep(0.2)
    assert not any(alive(p) for p in servers), "the temporary Prefect server outlived the sweep"

    again = subprocess.run(line, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    runs = client.search_runs([exp], "tags.sweep = 'kill' and tags.config_hash != ''")
    finished: dict[str, int] = {}
    for run in runs:
        if run.info.status == "FINISHED":
            key = run.data.tags["config_hash"]
            finished[key] = finished.get(key, 0) + 1
    assert len(finished) == 3 and set(finished.values()) == {1}
