"""The comparison report of a sweep, read back from real MLflow runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from fedcore.config import config_dir
from fedcore.pipeline.sweep import load_sweep
from fedcore.tracking import load_settings, mlflow_client
from fedcore.tracking.report import build_report, sweep_parent_run
from fedcore.tracking.runner import run_tracked

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)


def _sweep_file(tmp_path, methods, seeds=(0, 1)):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump({
        "name": "small",
        "base": str(config_dir() / "experiment.yaml"),
        "grid": {"method": list(methods), "seed": list(seeds)},
        "set": {"rounds": 2, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 3, "local.epochs": 1, "target_accuracy": 0.2},
    }))
    return path


@pytest.fixture
def ran_sweep(tracking, tmp_path):
    from flows.sweep import parent_run

    path = _sweep_file(tmp_path, ["fedavg", "fedavg_topk"])
    spec = load_sweep(path)
    parent = parent_run(spec)
    for cell in spec.cells:
        run_tracked(cell.config, parent_run_id=parent, tags={"sweep": spec.name})
    return path, spec, parent


def test_table_is_mean_and_interval_over_seeds_of_the_recorded_runs(ran_sweep, tmp_path):
    path, spec, parent = ran_sweep
    assert sweep_parent_run(spec) == parent
    report = build_report(spec, tmp_path / "out", parent_run_id=parent)
    client = mlflow_client(load_settings())
    table = report.table.set_index("method")
    assert list(table.index) == ["fedavg", "fedavg_topk"]
    assert (table["seeds"] == 2).all()
    for method in table.index:
        runs = report.runs[report.runs["method"] == method]
        got = [client.get_run(r).data.metrics for r in runs["run_id"]]
        acc = [m["final/accuracy"] for m in got]
        assert table.loc[method, "accuracy_mean"] == pytest.approx(np.mean(acc))
        low, high = stats.t.interval(0.95, 1, loc=np.mean(acc), scale=stats.sem(acc))
        if np.std(acc) > 0:
            assert (table.loc[method, "accuracy_low"], table.loc[method, "accuracy_high"]) == (
                pytest.approx((low, high)))
        worst = [m["final/accuracy_worst10"] for m in got]
        assert table.loc[method, "worst10_mean"] == pytest.approx(np.mean(worst))
        gb = [m["comm/bytes_up_total"] / 1e9 for m in got]
        assert table.loc[method, "gb_sent_mean"] == pytest.approx(np.mean(gb))
        jain = [m["clients/jain_index"] for m in got]
        assert table.loc[method, "jain_mean"] == pytest.approx(np.mean(jain))
    assert table.loc["fedavg_topk", "gb_sent_mean"] < table.loc["fedavg", "gb_sent_mean"] / 5
    names = {f.name for f in report.files}
    assert names == {"table.md", "table.html", "table.csv", "runs.csv", "convergence.png",
                     "forest.png", "client_accuracy.png", "accuracy_vs_gb.png"}
    assert all(f.stat().st_size > 0 for f in report.files)
    md = (tmp_path / "out" / "table.md").read_text()
    for label in ("final accuracy", "worst-10 %", "client accuracy std", "Jain", "AUC",
                  "rounds to target", "GB sent"):
        assert f"| {label} " in md or f"| {label} |" in md
    assert "4 finished runs of 4 cells" in md
    for label in ("Δ accuracy vs ref", "Δ worst-10 % vs ref", "best?", "regime", "tuning"):
        assert f"| {label} |" in md
    lines = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    # local.epochs 1 is not the default experiment's 5: the local part is named as changed
    assert "| reference |" in lines["fedavg (tuned)"]
    assert ", p=" in lines["fedavg_topk (tuned)"]
    assert "method paper · local tuned · data default | by hand |" in lines["fedavg (tuned)"]
    # the paired test of the report is the one of fedcore.pipeline.stats on the runs' seeds
    topk = report.tests[0].comparison
    by = {m: report.runs[report.runs["method"] == m].set_index("seed")["accuracy"]
          for m in ("fedavg", "fedavg_topk")}
    assert topk.difference.mean == pytest.approx(float((by["fedavg_topk"] - by["fedavg"]).mean()))
    csv = pd.read_csv(tmp_path / "out" / "table.csv")
    assert {"accuracy_mean", "auc_low", "rounds_to_target_mean"} <= set(csv.columns)
    html = (tmp_path / "out" / "table.html").read_text(encoding="utf-8")
    assert "<table" in html and '<meta charset="utf-8">' in html
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert {f"report/{n}" for n in names} == logged
    note = client.get_run(parent).data.tags["mlflow.note.content"]  # the run description
    assert note.startswith(md.split("\n\n")[0]) and "| Δ accuracy vs ref |" in note
    assert "| worst-10 % |" not in note and len(note) < 8000  # the main columns only


def test_missing_cells_are_counted_and_no_runs_is_an_error(ran_sweep, tmp_path):
    path, _, _ = ran_sweep
    bigger = load_sweep(_sweep_file(tmp_path, ["fedavg", "fedavg_topk", "fedprox"]))
    report = build_report(bigger, tmp_path / "out2")
    assert len(report.runs) == 4
    assert "(2 missing)" in (tmp_path / "out2" / "table.md").read_text()
    none = load_sweep(_sweep_file(tmp_path, ["fedprox"]))
    with pytest.raises(LookupError, match="no FINISHED run"):
        build_report(none, tmp_path / "out3")


def test_cli_and_flow_write_the_report(ran_sweep, tmp_path, prefect_harness, capsys):
    from fedcore.cli import main
    from flows.report import report

    path, _, _ = ran_sweep
    assert main(["report", str(path), "--out", str(tmp_path / "cli")]) == 0
    assert "| fedavg_topk (tuned) |" in capsys.readouterr().out
    out = report(str(path), out_dir=str(tmp_path / "flow"))
    assert out["runs"] == 4 and (tmp_path / "flow" / "convergence.png").is_file()
    assert main(["report", str(path), "dataset.alpha=-1"]) == 2
    assert main(["report", str(path), "--out", str(tmp_path / "r"), "--reference", "nope"]) == 1
    assert "reference 'nope' matches no row" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything is written
