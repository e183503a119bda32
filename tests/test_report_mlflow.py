"""MLflow agrees with the report, in a real SQLite store: the cells' ``row`` and regime tags
are the report's, ``variants.json`` has one entry per row ranked by the primary endpoint with
intervals in range, the parent has one cell count, and each family's search string and link
select exactly its runs."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from fedcore.core.config import config_dir
from fedcore.specs.sweep import load_sweep
from fedcore.tracking import load_settings, mlflow_client
from fedcore.tracking.names import cell_identities
from fedcore.tracking.parents import VARIANT_TABLE, sweep_summary
from fedcore.tracking.report import build_report
from fedcore.tracking.run_store import MlflowRunStore
from fedcore.tracking.runner import run_tracked

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)

FAMILY = {"name": "tiny", "paper": "Tiny paper", "reference": "craft",
          "baselines": ["fedavg", "fedavg (tuned)"]}


def _spec(tmp_path, name="agree", families=(FAMILY,)):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name,
        "base": str(config_dir() / "experiment.yaml"),
        "studies": {"fedavg": "fedavg_lr"},
        "grid": [{"method": ["fedavg", "craft"]},
                 {"method": ["fedavg"], "method.aggregator.server_lr": [0.9]}],
        "seeds": [0, 1],
        "set": {"rounds": 2, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 3, "local.epochs": 1, "local.steps": 2},
        "families": list(families),
    }))
    return load_sweep(path)


def _run(spec, parent=None):
    """Every cell as ``fedcore sweep`` runs it: tagged with its sweep and identity."""
    ids = []
    for cell, identity in zip(spec.cells, cell_identities(spec.cells, spec.families),
                              strict=True):
        tags = {"sweep": spec.name, **{k: v for k, v in identity.items() if k != "run_name"}}
        ids.append(run_tracked(cell.config, parent_run_id=parent, tags=tags,
                               run_name=identity["run_name"])[0])
    return ids


def test_cells_carry_the_reports_row_and_regime(tracking, tmp_path):
    spec = _spec(tmp_path)
    ids = _run(spec)
    client = mlflow_client(load_settings())
    report = build_report(spec, tmp_path / "out")
    runs = report.runs.set_index("run_id")
    for run_id in ids:
        tags = client.get_run(run_id).data.tags
        assert tags["row"] == runs.loc[run_id, "row"]
        assert tags["hparams"] == runs.loc[run_id, "hparams"]
    tuned = [client.get_run(i).data.tags for i in ids
             if client.get_run(i).data.tags["row"] == "fedavg (tuned)"]
    assert len(tuned) == 2 and all(t["method"] == "fedavg" for t in tuned)
    assert {t["hparams_method"] for t in tuned} == {"tuned"}  # a study's values, not "set"


def test_each_family_names_a_search_and_link_that_open_exactly_its_runs(tracking, tmp_path):
    from fedcore.flows.sweep import parent_run

    spec = _spec(tmp_path)
    parent = parent_run(spec)
    _run(spec, parent)
    report = build_report(spec, tmp_path / "out", parent_run_id=parent)
    md = (tmp_path / "out" / "table.md").read_text()
    section = md.split("## Runs in MLflow", 1)[1].split("\n## ", 1)[0]
    line = next(x for x in section.splitlines() if x.startswith("- **Tiny paper**"))
    query = line.split("search `` ", 1)[1].split(" ``", 1)[0]
    assert query.startswith("tags.sweep = 'agree' and tags.`family.tiny` = 'yes' and ")
    store = MlflowRunStore(load_settings())
    found = {r.info.run_id for r in store.matching(query)}
    mine = report.runs[report.runs["row"].isin(FAMILY["baselines"] + ["craft"])]
    assert found == set(mine["run_id"]) and len(found) == 6
    url = line.split("[open in MLflow](", 1)[1].split(")", 1)[0]
    fragment = urlsplit(url.split("#", 1)[1])
    assert fragment.path == f"/experiments/{store.experiment_id()}/runs"
    assert parse_qs(fragment.query)["searchFilter"] == [query]
    # an older finished run of the family's tags (the same code): no tag search selects
    # exactly the report's runs any more; the run ids do
    client = mlflow_client(load_settings())
    alpha = str(report.runs["alpha"].iloc[0])
    extra = client.create_run(store.experiment_id(), tags={
        "sweep": "agree", "family.tiny": "yes", "dataset": "digits", "alpha": alpha,
        "fedcore.code_digest": report.runs["code_digest"].iloc[0]})
    client.set_terminated(extra.info.run_id, "FINISHED")
    build_report(spec, tmp_path / "out", parent_run_id=parent)
    md = (tmp_path / "out" / "table.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("- **Tiny paper**"))
    query = line.split("search `` ", 1)[1].split(" ``", 1)[0]
    assert query.startswith("attributes.run_id IN (")
    assert {r.info.run_id for r in store.matching(query)} == set(mine["run_id"])


def test_variants_json_is_one_entry_per_row_ranked_by_the_primary_endpoint(tracking, tmp_path):
    from fedcore.flows.sweep import parent_run

    spec = _spec(tmp_path)
    parent = parent_run(spec)
    _run(spec, parent)
    report = build_report(spec, tmp_path / "out", parent_run_id=parent)
    client = mlflow_client(load_settings())
    local = client.download_artifacts(parent, VARIANT_TABLE, str(tmp_path))
    table = json.loads(open(local).read())
    columns, data = table["columns"], table["data"]
    entries = [dict(zip(columns, d, strict=True)) for d in data]
    assert len(entries) == len(report.table) == 3  # one per row, not one per run or twice
    assert sorted(e["variant"] for e in entries) == ["craft", "fedavg", "fedavg (tuned)"]
    label = "accuracy, mean of last k"
    assert columns[1] == label
    means = [e[label] for e in entries]
    assert means == sorted(means, reverse=True)
    assert all(0.0 <= e["95 % low"] <= e["95 % high"] <= 1.0 for e in entries
               if e["95 % low"] is not None)
    # one cell count on the parent: what the sweep logs and the report says agree
    planned = sum(spec.planned(c) for c in spec.cells)
    note = sweep_summary(client, parent, spec.name, [{"status": "finished"}] * 4
                         + [{"status": "skipped"}], planned=planned)
    assert note.startswith("### Sweep `agree`: 6 cells planned (4 finished now, 1 finished "
                           "before (skipped), 0 failed, 1 not run")
    run = client.get_run(parent).data
    assert run.metrics["cells/planned"] == 6.0 and "cells" not in run.params
    assert sum(run.metrics[f"cells/{s}"] for s in ("finished", "skipped", "failed",
                                                   "not_run")) == 6.0
    build_report(spec, tmp_path / "out", parent_run_id=parent)
    assert "6 cells planned:" in client.get_run(parent).data.tags["mlflow.note.content"]


def test_latex_for_a_sweep_without_families_is_an_exploratory_table(tracking, tmp_path):
    spec = _spec(tmp_path, name="plain", families=())
    _run(spec)
    report = build_report(spec, tmp_path / "out", latex=True)
    tex = (tmp_path / "out" / "families.tex").read_text()
    assert "\\begin{tabular}{@{}lrr@{}}" in tex and "no comparison family" not in tex
    assert "CRAFT" in tex and "FedAvg (tuned)" in tex
    assert "Acc.\\ last" in tex and "\\label{tab:rows-digits-a" in tex
    stats = (tmp_path / "out" / "statistics.md").read_text()
    assert "Every row was run with 2 seeds." in stats
    assert {p.name for p in report.files} >= {"families.tex", "statistics.md"}


def test_the_link_opens_exactly_the_familys_runs_in_the_mlflow_ui(tracking, tmp_path,
                                                                   monkeypatch):
    """The report's link, opened in headless Chromium against ``mlflow ui`` on the store,
    lists the family's runs and not another run of the same sweep."""
    import os
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from fedcore.core.compose.configure import load_config

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (scripts/setup_browser.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("FEDCORE_MLFLOW_UI_URL", f"http://127.0.0.1:{port}")
    spec = _spec(tmp_path)
    ids = _run(spec)
    run_tracked(load_config(None, ["method=fedprox", "rounds=1", "model.name=mlp",
                                   "dataset.num_clients=6", "clients_per_round=3"]),
                tags={"sweep": spec.name}, run_name="outsider-of-the-family")
    build_report(spec, tmp_path / "out")
    md = (tmp_path / "out" / "table.md").read_text()
    link = md.split("[open in MLflow](", 1)[1].split(")", 1)[0]
    assert link.startswith(f"http://127.0.0.1:{port}/#/experiments/")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking.tracking_uri,
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.5)
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=30000",
             "--dump-dom", link], capture_output=True, text=True, timeout=180, check=False)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    dom = done.stdout
    client = mlflow_client(load_settings())
    names = {client.get_run(i).info.run_name for i in ids}
    assert len(names) == 6 and all(n in dom for n in names), done.stderr[-2000:]
    assert "outsider-of-the-family" not in dom
