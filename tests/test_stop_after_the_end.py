"""A SIGINT that arrives after the last round (while the run ends) printed "run the same command
again to resume", and doing so made a second FINISHED run: a command whose work finished says
there is nothing to resume and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.conftest import TINY

SCRIPT = """
import signal, sys
from fedcore.core.callbacks import dispatch
from fedcore.core.runtime import stopping
from fedcore.cli import main

real = dispatch.end_run

def end_run(callbacks, result):  # the signal comes while the finished run is being ended
    stopping.request(signal.SIGINT)
    real(callbacks, result)

dispatch.end_run = end_run
sys.exit(main(["run", *sys.argv[1:]]))
"""


def test_a_sigint_after_the_last_round_leaves_nothing_to_resume(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri,
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts")}
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", SCRIPT, *TINY, "rounds=1"], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("fedcore: SIGINT received after the run had finished; nothing to resume"
            in done.stderr), done.stderr[-2000:]
    assert "run the same command again" not in done.stderr
    client = MlflowClient(uri)
    runs = client.search_runs(sorted({e.experiment_id for e in client.search_experiments()}))
    assert [r.info.status for r in runs] == ["FINISHED"]
