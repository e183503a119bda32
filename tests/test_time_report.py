"""The simulated-clock figure of a sweep report (issue 48): each run's clock read back from
MLflow and test accuracy drawn against it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from mlflow import MlflowClient

from fedcore.api import load_config, run_tracked
from fedcore.figures.simulated_time import accuracy_vs_time_png
from fedcore.tracking.sweep_runs import clocks

TINY = ["rounds=3", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3",
        "local.steps=2"]


def test_the_clock_is_read_back_and_plotted(tracking, tmp_path: Path) -> None:
    timed, _ = run_tracked(load_config(None, [*TINY, "system.link_s=3"]))
    untimed, _ = run_tracked(load_config(None, TINY))
    client = MlflowClient(tracking.tracking_uri)
    runs = pd.DataFrame({"run_id": [timed, untimed], "row": ["timed", "untimed"]})
    clock = clocks(client, runs)
    assert list(clock) == [timed]  # a run without a clock has none
    assert clock[timed].tolist() == [5.0, 10.0, 15.0] and clock[timed].index.tolist() == [1, 2, 3]
    acc = {r: pd.Series({m.step: m.value for m in client.get_metric_history(r, "test/accuracy")})
           for r in (timed, untimed)}
    out = tmp_path / "accuracy_vs_time.png"
    accuracy_vs_time_png(runs, acc, clock, out)
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"
    assert clocks(client, runs.iloc[1:]) == {}
