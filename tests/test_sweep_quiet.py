"""A sweep's grid may hold mappings (a whole component block per cell) on every runner, and a
sweep that succeeds prints progress, not noise: no traceback, no Dask kill warning, no MLflow
truncation warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedcore.flows.sweep import task_run_name
from fedcore.specs.sweep import load_sweep
from fedcore.tracking.names import cell_identities
from tests.processes import prefect_home

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"rounds": 1, "model.name": "mlp", "dataset.num_clients": 4, "clients_per_round": 2,
         "local.epochs": 1}
MAPPINGS = {"method": ["fedprox"],
            "method.client": [{"algorithm": "fedprox", "mu": 0.1},
                              {"algorithm": "fedprox", "mu": 0.01}]}


def _sweep_file(folder: Path, grid: dict, name: str = "maps") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "grid": grid, "set": SMALL}, sort_keys=False))
    return path


def test_mapping_cells_have_readable_labels_run_names_and_task_run_names(tmp_path):
    grid = {"method.aggregator": [{"rule": "trimmed_mean", "trim_fraction": 0.1},
                                  {"rule": "median"}], **MAPPINGS}
    spec = load_sweep(_sweep_file(tmp_path, grid))
    assert spec.cells[0].label == ("method.aggregator={rule: trimmed_mean, trim_fraction: 0.1} "
                                   "method=fedprox method.client={algorithm: fedprox, mu: 0.1}")
    ids = cell_identities(spec.cells)
    assert ids[0]["run_name"] == ("fedprox-digits-a0.1-s0 rule=trimmed_mean trim_fraction=0.1 "
                                  "algorithm=fedprox mu=0.1")
    assert ids[3]["run_name"] == "fedprox-digits-a0.1-s0 rule=median algorithm=fedprox mu=0.01"
    assert len({i["run_name"] for i in ids}) == len(ids) == 4
    params = {"resolved": {}, "identity": ids[0]}  # Prefect formats the name with these
    for identity in [*ids, {"run_name": "odd {name} {0} {{x}}"}]:
        assert task_run_name(identity).format(**params) == identity["run_name"]


@pytest.mark.slow
def test_mapping_grid_runs_on_the_thread_runner(prefect_harness, tracking, tmp_path):
    from fedcore.flows.sweep import sweep

    rows = sweep(str(_sweep_file(tmp_path, MAPPINGS)), max_workers=2, runner="thread")
    assert [r["status"] for r in rows] == ["finished", "finished"]
    assert rows[0]["run_name"].endswith("algorithm=fedprox mu=0.1")


NOISE = ("Traceback", "CommClosedError", "still alive", "killing", "truncated", "Error")


@pytest.mark.slow
def test_a_small_dask_sweep_of_mappings_succeeds_quietly_with_progress(tmp_path):
    """`fedcore sweep` on a LocalCluster, as the main job runs: its whole output is checked."""
    path = _sweep_file(tmp_path, MAPPINGS, "quiet")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDCORE_HOME": str(tmp_path),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "FEDCORE_ARTIFACT_LOCATION": str(tmp_path / "artifacts"),
           "PREFECT_HOME": prefect_home(tmp_path / "prefect"), "PREFECT_LOGGING_LEVEL": "INFO"}
    env.pop("PREFECT_API_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "fedcore", "sweep", str(path), "--runner", "dask",
         "--workers", "2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    noisy = [line for line in text.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, noisy
    assert not re.search(r"\| INFO +\| distributed\.", text)  # Dask's connection log
    assert not re.search(r"Task run '.*' - Finished in state Completed", text)  # per cell: once
    assert re.search(r"Flow run 'sweep-quiet-\d{8}-\d{6}'", text)  # a readable flow-run name
    progress = re.findall(r"\[(\d)/2\] finished (fedprox-digits-a0\.1-s0 algorithm=fedprox "
                          r"mu=0\.0?1) \| \d\d:\d\d elapsed, ETA \d\d:\d\d, +[\d.]+(s/cell|cell/s)",
                          text)
    assert sorted(p[0] for p in progress) == ["1", "2"], text[-3000:]
    print(f"{len(text.splitlines())} lines")


def test_a_long_description_is_cut_to_mlflows_limit_and_kept_whole_as_an_artifact():
    """MLflow truncates a tag over 8,000 characters with a warning (the main job's 123-cell
    table did); fedcore cuts it at a line and logs the whole text as an artifact."""
    from fedcore.tracking.parents import NOTE_LIMIT, NOTE_TAG, set_description, spaced_tables

    class Client:
        def __init__(self) -> None:
            self.tags: dict[str, str] = {}
            self.texts: dict[str, str] = {}

        def set_tag(self, run_id: str, key: str, value: str) -> None:
            self.tags[key] = value

        def log_text(self, run_id: str, text: str, name: str) -> None:
            self.texts[name] = text

    table = "\n".join(f"| cell {i} | finished | 0.{i:04d} |" for i in range(600))
    client = Client()
    set_description(client, "run", table)  # type: ignore[arg-type]
    note = client.tags[NOTE_TAG]
    assert NOTE_LIMIT == 8000 and len(note) <= NOTE_LIMIT
    assert note.endswith("lines; in full: artifact description.md)")
    spaced = spaced_tables(table)  # the UI's tables get a blank column between columns
    assert "| cell 0 |" in note and spaced.startswith(note.split("\n\n(cut")[0])
    assert client.texts == {"description.md": spaced}
    short = Client()
    set_description(short, "run", "| a |")  # type: ignore[arg-type]
    assert short.tags == {NOTE_TAG: "| a |"} and not short.texts
