"""Four processes opening one new SQLite tracking store at the same moment: one creates the
schema, the others wait; all four record their run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

WRITER = """
import sys, time
from pathlib import Path
from fedcore.tracking import load_settings
from fedcore.tracking.mlflow_tracker import get_experiment_id, mlflow_client
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.005)
settings = load_settings()
client = mlflow_client(settings)
run = client.create_run(get_experiment_id(client, settings))
client.set_terminated(run.info.run_id, "FINISHED")
"""


def test_four_processes_create_one_store_together(tmp_path):
    db = tmp_path / "new" / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / f"ready{i}"), str(go)],
                         env=env, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    deadline = time.monotonic() + 300
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    go.touch()  # all four open the store at once
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n".join(e[-600:] for e in errors)
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("fedcore")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 4
