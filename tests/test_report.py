"""The comparison report of a sweep, read back from real MLflow runs: the families' verdicts, the
exploratory table, failed seeds, the files and the parent run."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from fedcore.core.config import config_dir
from fedcore.report.summary import target_text
from fedcore.specs.sweep import load_sweep
from fedcore.tracking import load_settings, mlflow_client
from fedcore.tracking.report import build_report
from fedcore.tracking.runner import run_tracked
from fedcore.tracking.sweep_runs import sweep_parent_run

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)


def _sweep_file(tmp_path, methods, seeds=(0, 1, 2), families=None, grid=None, name="small"):
    path = tmp_path / f"{name}.yaml"
    spec = {
        "name": name,
        "base": str(config_dir() / "experiment.yaml"),
        "grid": grid or {"method": list(methods)},
        "seeds": list(seeds),
        "set": {"rounds": 3, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 3, "local.epochs": 1, "target_accuracy": 0.3},
    }
    if families:
        spec["families"] = families
    path.write_text(yaml.safe_dump(spec))
    return path


FAMILY = [{"name": "topk", "paper": "Test", "reference": "fedavg", "baselines": ["fedavg_topk"]}]


@pytest.fixture
def ran_sweep(tracking, tmp_path):
    from fedcore.flows.sweep import parent_run

    path = _sweep_file(tmp_path, ["fedavg", "fedavg_topk"], families=FAMILY)
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
    assert (table["seeds"] == 3).all() and (table["failed"] == 0).all()
    for method in table.index:
        runs = report.runs[report.runs["method"] == method]
        got = [client.get_run(r).data.metrics for r in runs["run_id"]]
        for key, metric in (("accuracy_last_k", "final/accuracy_last_k"),
                            ("accuracy", "final/accuracy"),
                            ("worst10", "final/accuracy_worst10"),
                            ("jain", "clients/jain_index")):
            values = [m[metric] for m in got]
            assert table.loc[method, f"{key}_mean"] == pytest.approx(np.mean(values))
            if np.std(values) > 0:
                low, high = stats.t.interval(0.95, 2, loc=np.mean(values),
                                             scale=stats.sem(values))
                # cut to the range of an accuracy (a t-interval on 3 seeds can leave it)
                assert (table.loc[method, f"{key}_low"], table.loc[method, f"{key}_high"]) == (
                    pytest.approx((max(low, 0.0), min(high, 1.0))))
    assert table.loc["fedavg_topk", "gb_sent_mean"] < table.loc["fedavg", "gb_sent_mean"] / 5
    names = {f.name for f in report.files}
    assert names == {"table.md", "table.html", "table.csv", "runs.csv", "convergence.png",
                     "forest.png", "client_accuracy.png", "accuracy_vs_gb.png", "summary.md"}
    assert all(f.stat().st_size > 0 for f in report.files)
    summary = (tmp_path / "out" / "summary.md").read_text()  # what run-main.sh publishes
    assert summary.startswith("# Sweep ") and "6 cells planned: 6 finished" in summary
    md = (tmp_path / "out" / "table.md").read_text()
    assert "6 cells planned: 6 finished, 0 diverged or failed" in md
    assert "**Primary endpoint** (declared in the sweep file before it ran): mean test " \
           "accuracy of the last 5 evaluations (final/accuracy_last_k), rounds 1-3 of 3" in md
    assert "### Test: `fedavg` against its baselines (digits" in md
    every_row = md.split("## Every row")[1].split("\n\n")[1]  # the exploratory table
    for label in ("accuracy, mean of last k", "final accuracy", "worst-10 %", "rounds to target",
                  "GB sent", "detectable Δ vs ref", "regime", "seeds"):
        assert f"| {label} |" in every_row
    for label in ("Jain", "mean accuracy over evaluations", "tuning", "client accuracy std"):
        assert f"| {label} |" not in every_row  # in the CSV
    assert max(len(line) for line in md.splitlines() if line.startswith("|")) < 250
    # the ranking: the setting's rows ordered by the primary endpoint, with n and interval
    ranking = md.split("## Ranking per setting")[1].split("\n## ")[0]
    assert "### digits, Dirichlet 0.1" in ranking
    ranked = [line.split(" | ") for line in ranking.splitlines() if line.startswith("| 1 ")
              or line.startswith("| 2 ")]
    means = table["accuracy_last_k_mean"].sort_values(ascending=False)
    assert [r[1] for r in ranked] == list(means.index)
    assert [float(r[4]) for r in ranked] == pytest.approx(list(means), abs=1e-4)
    assert all(r[3] == "3" and r[5].startswith("[") for r in ranked)
    assert "≈ best" not in md and "indistinguishable" not in md
    # every row's training state at the endpoint, and the count in the header
    assert re.search(r"\*\*Training state at the endpoint\*\*: \d of 2 rows still climbing", md)
    assert "| training at the endpoint |" in md and "| best? | training |" in md
    assert "![" in md and "](convergence.png)" in md and "](forest.png)" in md  # Figures
    assert all(t.startswith(("climbing (", "plateaued (", "too short to tell"))
               for t in report.table["training"])
    # the family's comparison is the one of fedcore.stats.looks on the runs' seeds
    (outcome,) = report.outcomes
    c = outcome.decisions[0].comparison
    by = {m: report.runs[report.runs["method"] == m].set_index("seed")["accuracy_last_k"]
          for m in ("fedavg", "fedavg_topk")}
    assert c is not None and c.interval.mean == pytest.approx(
        float((by["fedavg"] - by["fedavg_topk"]).mean()))
    csv = pd.read_csv(tmp_path / "out" / "table.csv")
    assert {"accuracy_last_k_mean", "auc_low", "failed", "target_text"} <= set(csv.columns)
    html = (tmp_path / "out" / "table.html").read_text(encoding="utf-8")
    assert "<table" in html and '<meta charset="utf-8">' in html
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert {f"report/{n}" for n in names} == logged
    note = client.get_run(parent).data.tags["mlflow.note.content"]  # the run description
    assert note.startswith("# Sweep `small`") and "fedavg vs fedavg_topk:" in note


def test_every_family_row_agrees_with_its_interval(ran_sweep, tmp_path):
    """Reads the report's family tables: a better/worse verdict exactly when the adjusted
    interval excludes 0."""
    _, spec, _ = ran_sweep
    build_report(spec, tmp_path / "out")
    md = (tmp_path / "out" / "table.md").read_text()
    checked = 0
    for line in md.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) != 9 or cells[0] in ("row", "---") or "reference" in cells[0]:
            continue
        if cells[5].startswith("equivalent"):  # shows its TOST (1 - 2a) interval instead
            continue
        found = re.search(r"\[([-+][\d.]+), ([-+][\d.]+)\]", cells[4])
        if found is None:
            continue
        low, high = float(found.group(1)), float(found.group(2))
        assert (low > 0 or high < 0) == (cells[5] in ("better", "worse")), line
        checked += 1
    assert checked >= 1


def test_a_diverged_seed_stays_in_its_row(tracking, tmp_path):
    from fedcore.flows.sweep import parent_run

    fam = [{"name": "lr", "reference": "fedavg", "baselines": ["fedavg lr=1e+06"]}]
    path = _sweep_file(tmp_path, [], seeds=(0, 1), families=fam, name="div", grid=[
        {"method": ["fedavg"]}, {"method": ["fedavg"], "local.lr": [1e6]}])
    spec = load_sweep(path)
    parent = parent_run(spec)
    for cell in spec.cells:
        try:
            run_tracked(cell.config, parent_run_id=parent, tags={"sweep": spec.name})
        except FloatingPointError:
            pass
    report = build_report(spec, tmp_path / "out")
    assert set(report.runs["status"]) == {"FINISHED", "FAILED"}
    md = (tmp_path / "out" / "table.md").read_text()
    assert "4 cells planned: 2 finished, 2 diverged or failed (kept in their rows)" in md
    assert re.search(r"\| fedavg lr=1e\+06 \|.*\| 0 of 2 finished; 2 failed: diverged at "
                     r"round \d", md)
    assert "fedavg vs fedavg lr=1e+06: no verdict (seed 0: diverged at round" in md
    assert list(report.table["seeds"]) == [2, 0] and list(report.table["failed"]) == [0, 2]
    assert report.outcomes[0].decisions[0].verdict == "blocked"


def test_rounds_to_target_counts_the_seeds_that_never_reached_it():
    assert target_text([14.0, 14.0, float("nan")], 20) == "median 14 (2/3 reached)"
    assert target_text([5.0, float("nan"), float("nan")], 20) == "> 20 (1/3 reached)"
    assert target_text([3.0, 7.0, 9.0, 11.0], 20) == "median 9 (4/4 reached)"


def test_missing_cells_are_counted_and_no_runs_is_an_error(ran_sweep, tmp_path):
    bigger = load_sweep(_sweep_file(tmp_path, ["fedavg", "fedavg_topk", "fedprox"],
                                    name="bigger"))
    report = build_report(bigger, tmp_path / "out2")
    assert len(report.runs) == 6
    assert "3 not yet run" in (tmp_path / "out2" / "table.md").read_text()
    none = load_sweep(_sweep_file(tmp_path, ["fedprox"], name="none"))
    with pytest.raises(LookupError, match="no FINISHED run"):
        build_report(none, tmp_path / "out3")


def test_cli_and_flow_write_the_report(ran_sweep, tmp_path, prefect_harness, capsys):
    from fedcore.cli import main
    from fedcore.flows.report import report

    path, _, _ = ran_sweep
    assert main(["report", str(path), "--out", str(tmp_path / "cli"), "--last-k", "2"]) == 0
    assert "last 2 evaluations" in (tmp_path / "cli" / "table.md").read_text()
    flow = report(str(path), out_dir=str(tmp_path / "flow"))
    assert flow["runs"] == 6 and (tmp_path / "flow" / "convergence.png").is_file()
    capsys.readouterr()
    assert main(["report", str(path), "dataset.alpha=-1"]) == 2
    capsys.readouterr()
    assert main(["report", str(path), "--out", str(tmp_path / "r"), "--reference", "nope"]) == 2
    err = capsys.readouterr().err
    assert "reference 'nope' matches no row" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # refused before anything is written
    assert main(["report", str(path), "--out", str(tmp_path / "k"), "--last-k", "0"]) == 2
    capsys.readouterr()
    none = _sweep_file(tmp_path, ["fedprox"], name="none")
    assert main(["report", str(none), "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "no FINISHED run" in err and len(err.strip().splitlines()) == 1


def test_report_prints_the_headline_verdicts_and_paths_without_warnings(ran_sweep, tmp_path,
                                                                          capfd):
    """`fedcore report` writes its files and prints at most 30 lines: the summary's verdicts
    and where the files are, not the table; no warning of a statistics library reaches the
    terminal."""
    import warnings

    from fedcore.cli import main

    path, _, _ = ran_sweep
    out_dir = tmp_path / "quiet"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["report", str(path), "--out", str(out_dir)]) == 0
    printed = capfd.readouterr()
    lines = printed.out.splitlines()
    assert len(lines) <= 30, printed.out
    assert lines[0] == "# Sweep `small`" and "- fedavg vs fedavg_topk: " in printed.out
    assert "| fedavg_topk |" not in printed.out  # the table stays in table.md
    assert str(out_dir / "table.md") in printed.out
    assert "| fedavg_topk |" in (out_dir / "table.md").read_text()
    assert "Warning" not in printed.err and "Warning" not in printed.out
    libraries = ("statsmodels", "scipy", "numpy", "pandas")
    assert not [w for w in caught if any(f"{lib}/" in w.filename for lib in libraries)], [
        f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught]


def test_a_sweep_over_mappings_without_fedavg_is_reported(tracking, tmp_path, capsys):
    """A grid over mappings (how-to/sweeps.md's ablation form) groups by each mapping as a
    canonical string; with no fedavg row the first row is the reference, said in the header;
    summary.md keeps its shape (title, counts line)."""
    from fedcore.cli import main

    clients = [{"algorithm": "fedprox", "mu": 0.1}, {"algorithm": "fedprox", "mu": 0.01}]
    path = _sweep_file(tmp_path, [], seeds=(0, 1), name="ablation",
                       grid={"method": ["fedprox"], "method.client": clients})
    spec = load_sweep(path)
    for cell in spec.cells:
        run_tracked(cell.config, tags={"sweep": spec.name})
    out_dir = tmp_path / "ablation"
    assert main(["report", str(path), "--out", str(out_dir)]) == 0
    first = spec.cells[0].row
    assert f"**Reference row**: `{first}`, the sweep's first row" in capsys.readouterr().out
    text = (out_dir / "table.md").read_text()
    assert f"**Reference row**: `{first}`, the sweep's first row" in text
    from fedcore.stats.comparison import canonical

    assert f"`{first}` row a paired t-test" in text
    table = pd.read_csv(out_dir / "table.csv")
    assert sorted(table["grid:method.client"]) == sorted(canonical(c) for c in clients)
    assert list(table["seeds"]) == [2, 2]
    summary = (out_dir / "summary.md").read_text().split("\n\n")
    assert summary[0] == "# Sweep `ablation`" and summary[1].startswith("4 cells planned: 4 ")
    assert canonical({"mu": 0.1, "algorithm": "fedprox"}) == canonical(clients[0])
    assert canonical([1, {"b": 2, "a": 1}]) == '[1, {"a": 1, "b": 2}]'
    assert canonical(0.1) == 0.1
    assert main(["report", str(path), "--out", str(tmp_path / "r2"), "--reference",
                 spec.cells[-1].row]) == 0
    assert f"`{spec.cells[-1].row}` row a paired t-test" in (tmp_path / "r2" /
                                                             "table.md").read_text()


def test_runs_stopped_early_on_a_validation_metric_are_named():
    from fedcore.report.text import early_text

    runs = pd.DataFrame({"stopped_early": ["", "early_stopping: val/accuracy did not improve "
                                               "for 5 evaluations", ""]})
    line = early_text(runs)
    assert line.startswith("**Stopped early**: 1 run(s) ended before the horizon on a "
                           "validation metric or a privacy budget (early_stopping: "
                           "val/accuracy")
    assert early_text(runs.assign(stopped_early="")) == ""


def test_the_report_finds_each_cells_run_as_a_search_per_cell_does(ran_sweep):
    """``sweep_runs`` reads all cells' runs in one search per code digest; each cell gets the
    run that asking for it alone gives (its newest FINISHED run made by this code)."""
    from fedcore.core.round import code_digest
    from fedcore.tracking.runner import finished_run
    from fedcore.tracking.sweep_runs import sweep_runs

    _, spec, _ = ran_sweep
    runs = sweep_runs(spec).set_index("config_hash")["run_id"]
    assert len(runs) == len(spec.cells)
    for cell in spec.cells:
        h = cell.config.config_hash()
        alone = finished_run(h, code=code_digest.of_config(cell.config))
        assert alone is not None and runs[h] == alone.info.run_id


def test_sweep_with_report_writes_what_fedcore_report_writes(
        tracking, prefect_harness, tmp_path, monkeypatch):
    """`fedcore sweep SWEEP.yaml --report` (what run-main.sh runs) writes, in the sweep's own
    process, the report that `fedcore report SWEEP.yaml` writes afterwards."""
    from fedcore.cli import main

    monkeypatch.setenv("FEDCORE_HOME", str(tmp_path / "home"))
    path = _sweep_file(tmp_path, ["fedavg", "fedavg_topk"], seeds=(0, 1), families=FAMILY,
                       name="with_report")
    assert main(["sweep", str(path), "--reference", "fedavg_topk"]) == 2  # needs --report
    assert main(["sweep", str(path), "--report", "--reference", "nope"]) == 2  # before any run
    assert not (tmp_path / "home" / "reports").exists()
    assert main(["sweep", str(path), "--report", "--reference", "fedavg_topk"]) == 0
    written = (tmp_path / "home" / "reports" / "with_report" / "table.md").read_text()
    assert "## Families: each paper's question" in written
    assert "`fedavg_topk` row a paired t-test" in written
    assert main(["report", str(path), "--out", str(tmp_path / "again"), "--reference",
                 "fedavg_topk"]) == 0
    assert (tmp_path / "again" / "table.md").read_text() == written


def test_intervals_group_mappings_and_lists_by_their_canonical_string():
    """A grid value that is a mapping or a list is a group key (typed in any key order)."""
    from fedcore.stats.comparison import with_intervals

    runs = pd.DataFrame({"grid:method.client": [{"algorithm": "fedprox", "mu": 0.1},
                                                {"mu": 0.1, "algorithm": "fedprox"},
                                                [1, 2], [1, 2]],
                         "seed": [0, 1, 0, 1], "m": [0.5, 0.7, 0.2, 0.4]})
    table = with_intervals(runs, ["m"], ["grid:method.client"])
    assert list(table["grid:method.client"]) == ['{"algorithm": "fedprox", "mu": 0.1}',
                                                 "[1, 2]"]
    assert list(table["seeds"]) == [2, 2]
    assert np.allclose(table["m_mean"], [0.6, 0.3])


def test_the_html_report_opens_in_chromium_as_rendered_tables_with_its_plots(ran_sweep,
                                                                              tmp_path):
    from .test_report_html import chromium_dom

    _, spec, _ = ran_sweep
    build_report(spec, tmp_path / "out")
    dom = chromium_dom(tmp_path / "out" / "table.html", tmp_path)
    assert "<pre" not in dom and "**" not in dom and "|---" not in dom  # rendered, not text
    tables = re.findall(r"<table[^>]*>(.*?)</table>", dom, re.S)
    assert len(tables) >= 3 and all("<th" in t and "<td" in t for t in tables)
    assert dom.count('data-sortable="ready"') == len(tables)  # the sort script ran on each
    images = re.findall(r'<img [^>]*src="([^"]*)"', dom)
    assert len(images) >= 3 and all(s.startswith("data:image/png;base64,") for s in images)
    assert not re.search(r'(src|href)="(?!data:|https?:|#)', dom)  # nothing beside the file
    assert "<h2>Ranking per setting</h2>" in dom
