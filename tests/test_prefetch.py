"""A tracked run's end finds its packages (figures, Parquet) imported by the prefetch thread."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import TINY

SCRIPT = """
import sys, threading
from fedcore.config import load_config
from fedcore.tracking import mlflow_tracker
from fedcore.tracking.runner import run_tracked

finish = mlflow_tracker.MLflowTracker._finish

def spy(self, result):
    for t in threading.enumerate():
        if t.name == "fedcore-prefetch":
            t.join()
    before = set(sys.modules)
    finish(self, result)
    late = sorted({m.split(".")[0] for m in set(sys.modules)} - {m.split(".")[0] for m in before})
    print("imported at the end:", late)

mlflow_tracker.MLflowTracker._finish = spy
run_tracked(load_config(None, sys.argv[1:]))
"""


def test_a_tracked_runs_end_imports_no_plotting_or_table_library(tracking):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *TINY, "rounds=1"], capture_output=True,
                         text=True, check=True).stdout
    late = out.split("imported at the end:")[1]
    for package in ("matplotlib", "pandas", "pyarrow", "PIL"):
        assert f"'{package}'" not in late, late
