"""A sweep report with private rows: epsilon (at delta) per row, as the runs recorded it, and
the accuracy-vs-epsilon figure; a report without one has neither."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedcore.core.config import config_dir
from fedcore.report.privacy import COLUMN, epsilon_text
from fedcore.specs.sweep import load_sweep
from fedcore.tracking.report import build_report
from fedcore.tracking.runner import run_tracked

SET = {"rounds": 3, "model.name": "mlp", "dataset.num_clients": 6, "clients_per_round": 3,
       "local.epochs": 1, "local.steps": 2}
PRIVATE = {"method": ["fedavg"], "privacy.mechanism": ["central"],
           "privacy.noise_multiplier": [0.7, 1.4]}


def _sweep(tmp_path, grid, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "base": str(config_dir() / "experiment.yaml"), "grid": grid,
        "seeds": [0, 1], "set": SET}))
    return load_sweep(path)


def test_report_shows_epsilon_at_delta_per_row_and_the_accuracy_vs_epsilon_plot(
        tracking, tmp_path):
    spec = _sweep(tmp_path, [PRIVATE, {"method": ["fedavg"]}], "private")
    ids = {}
    for cell in spec.cells:
        run_id, _ = run_tracked(cell.config, figures=False)
        ids.setdefault(cell.row, []).append(run_id)
    report = build_report(spec, tmp_path / "out")
    md = (tmp_path / "out" / "table.md").read_text()
    assert f"| regime | {COLUMN} |" in md
    assert (tmp_path / "out" / "accuracy_vs_epsilon.png").stat().st_size > 0
    client = MlflowClient(tracking.tracking_uri)
    texts = dict(zip(report.table["row"], report.table["epsilon_text"], strict=True))
    assert texts["fedavg"] == "∞"
    for z in (0.7, 1.4):
        row = f"fedavg mechanism=central noise_multiplier={z:g}"
        runs = [client.get_run(r) for r in ids[row]]
        eps = max(r.data.metrics["privacy/epsilon"] for r in runs)
        delta = float(runs[0].data.params["dp.delta"])
        assert texts[row] == f"{eps:.4g} (δ={delta:.2g})"
        assert re.search(rf"\| {re.escape(row)} \| [^|]+ \| {re.escape(texts[row])} \|", md)
    assert texts["fedavg mechanism=central noise_multiplier=0.7"] != texts[
        "fedavg mechanism=central noise_multiplier=1.4"]

    plain = _sweep(tmp_path, [{"method": ["fedavg"]}], "plain")
    build_report(plain, tmp_path / "plain")
    assert COLUMN not in (tmp_path / "plain" / "table.md").read_text()
    assert not (tmp_path / "plain" / "accuracy_vs_epsilon.png").exists()


@pytest.mark.parametrize(("eps", "deltas", "text"), [
    ([1.5, 1.5], [0.01, 0.01], "1.5 (δ=0.01)"),
    ([math.inf, math.inf], [math.nan, math.nan], "∞"),
    ([math.nan], [math.nan], ""),
    ([2.0, 3.25], [1e-5, 1e-5], "3.25 (δ=1e-05)"),
])
def test_epsilon_text_is_the_largest_epsilon_of_the_finished_seeds(eps, deltas, text):
    assert epsilon_text(eps, deltas) == text


def test_the_plot_draws_one_line_per_method(tmp_path):
    from fedcore.figures.privacy import accuracy_vs_epsilon_png

    runs = pd.DataFrame({"method": ["a", "a", "b", "b"], "epsilon": [1.0, math.inf, 1.0, 8.0],
                         "accuracy_last_k": [0.5, 0.9, 0.4, 0.7]})
    accuracy_vs_epsilon_png(runs, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0
