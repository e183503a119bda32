"""Which code made a number: runs and checkpoints carry a code digest; sweeps, reports and
resumes reuse only work of the same code (docs/explanation/provenance.md).

A code change is simulated by monkeypatching ``fedcore.core.round.code_digest.current`` in this
process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

import fedcore
from fedcore.core.callbacks import Callback
from fedcore.core.compose.configure import load_config
from fedcore.core.round import checkpoint, code_digest
from fedcore.core.round.simulation import Simulation
from fedcore.specs.sweep import load_sweep
from fedcore.tracking.provenance import CODE_DIGEST_TAG
from fedcore.tracking.report import build_report
from fedcore.tracking.runner import SUPERSEDED_TAG, other_code_note, run_tracked

ROOT = Path(fedcore.__file__).resolve().parent.parent
SMALL = ["model.name=mlp", "dataset.num_clients=6", "clients_per_round=3", "local.epochs=1",
         "local.steps=2"]


def _copy_sources(dest: Path) -> Path:
    """fedcore/ as a clean clone or an installed wheel holds it (no caches)."""
    for package in code_digest.PACKAGES:
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _digest_in_subprocess(path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(path)}
    done = subprocess.run(
        [sys.executable, "-c",
         "from fedcore.core.round import code_digest; print(code_digest.current())"],
        env=env, capture_output=True, text=True, check=True, cwd=path,
    )
    return done.stdout.strip()


def test_digest_covers_the_sources_and_library_versions_only(tmp_path):
    versions = code_digest.library_versions()
    copy = _copy_sources(tmp_path / "clone")
    assert code_digest.digest_of(copy, versions) == code_digest.digest_of(ROOT, versions)
    assert code_digest.digest_of(copy, versions) == code_digest.current()
    (copy / "fedcore" / "notes.md").write_text("not code")
    (copy / "fedcore" / "__pycache__").mkdir(exist_ok=True)
    (copy / "fedcore" / "__pycache__" / "junk.py").write_text("x = 1\n")
    assert code_digest.digest_of(copy, versions) == code_digest.current()

    aggregator = copy / "fedcore" / "core" / "aggregators" / "__init__.py"
    aggregator.write_text(aggregator.read_text() + "\n# a change\n")
    assert code_digest.digest_of(copy, versions) != code_digest.current()
    aggregator.write_text(aggregator.read_text().removesuffix("\n# a change\n"))
    assert code_digest.digest_of(copy, versions) == code_digest.current()
    sweep = copy / "fedcore" / "flows" / "sweep.py"
    original = sweep.read_text()
    sweep.write_text(original.replace("retries=1", "retries=2"))
    assert code_digest.digest_of(copy, versions) != code_digest.current()
    sweep.write_text(original)
    sweep.rename(copy / "fedcore" / "flows" / "sweep_moved.py")  # same bytes under another name
    assert code_digest.digest_of(copy, versions) != code_digest.current()
    assert code_digest.digest_of(ROOT, {**versions, "torch": "0.0"}) != code_digest.current()


@pytest.mark.slow
def test_digest_is_the_same_in_two_processes_and_from_an_installed_copy(tmp_path):
    here = code_digest.current()
    assert len(here) == code_digest.LENGTH
    assert _digest_in_subprocess(ROOT) == here
    installed = _copy_sources(tmp_path / "site-packages")  # found through fedcore.__file__
    assert _digest_in_subprocess(installed) == here


def _other_code(monkeypatch, digest: str = "0ther0c0de00") -> None:
    monkeypatch.setattr(code_digest, "current", lambda: digest)


class StopAt(Callback):
    """Interrupts the run after round ``r`` was reported."""

    def __init__(self, r: int) -> None:
        self.r = r

    def on_run_start(self, sim):
        self.start = sim.round

    def on_round_end(self, record):
        if record.round == self.r:
            raise KeyboardInterrupt(f"stopped at round {record.round}")

    def on_run_end(self, result):
        pass


def test_a_checkpoint_of_other_code_is_not_resumed_and_is_deleted(tmp_path, monkeypatch):
    cfg = load_config(None, [*SMALL, "rounds=3", "checkpoint_every=1",
                             f"checkpoint_dir={tmp_path / 'ck'}"])
    folder = checkpoint.run_folder(cfg)
    with monkeypatch.context() as m:
        _other_code(m)
        with pytest.raises(KeyboardInterrupt):
            Simulation(cfg, [StopAt(3)]).run()
        assert checkpoint.load(checkpoint.checkpoint_files(folder)[-1])["code_digest"] == \
            "0ther0c0de00"
        assert Simulation(cfg).resume()  # the code that wrote it resumes it
    assert len(checkpoint.checkpoint_files(folder)) == 2
    fresh = Simulation(cfg)
    assert not fresh.resume() and fresh.round == 0
    assert checkpoint.checkpoint_files(folder) == []  # not kept to outrank the new run's files

    with pytest.raises(KeyboardInterrupt):
        Simulation(cfg, [StopAt(2)]).run()
    resumed = Simulation(cfg)
    assert resumed.resume() and resumed.round == 1


@pytest.mark.slow
def test_an_unfinished_run_of_other_code_is_superseded_not_resumed(tracking, tmp_path,
                                                                    monkeypatch):
    cfg = load_config(None, [*SMALL, "rounds=2", "checkpoint_every=1", "seed=4",
                             f"checkpoint_dir={tmp_path / 'ck'}"])
    with monkeypatch.context() as m:
        _other_code(m)
        with pytest.raises(KeyboardInterrupt):
            run_tracked(cfg, callbacks=[StopAt(2)])  # round 1's checkpoint: locally and in MLflow
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (old,) = client.search_runs([exp], f"tags.config_hash = '{cfg.config_hash()}'")
    assert old.data.tags[CODE_DIGEST_TAG] == "0ther0c0de00" and old.info.status == "FAILED"
    client.update_run(old.info.run_id, status="RUNNING")  # as if its process had been killed
    checkpoint.remove(checkpoint.run_folder(cfg))  # the artifact checkpoint is the only one

    seen = StopAt(0)
    run_id, _ = run_tracked(cfg, callbacks=[seen])
    assert run_id != old.info.run_id and seen.start == 0
    old = client.get_run(old.info.run_id)
    assert old.info.status == "KILLED" and old.data.tags[SUPERSEDED_TAG] == run_id
    new = client.get_run(run_id)
    assert new.info.status == "FINISHED"
    assert new.data.tags[CODE_DIGEST_TAG] == code_digest.current()
    assert "fedcore.resumed_from_round" not in new.data.tags


def _sweep_file(tmp_path: Path, seeds=(0,)) -> Path:
    path = tmp_path / "codever.yaml"
    path.write_text(yaml.safe_dump({
        "name": "codever",
        "grid": {"method": ["fedavg"], "seed": list(seeds)},
        "set": {"rounds": 1, "model.name": "mlp", "dataset.num_clients": 6,
                "clients_per_round": 3, "local.epochs": 1, "local.steps": 2},
    }))
    return path


@pytest.mark.slow
def test_sweep_reruns_cells_of_other_code_and_reports_the_new_runs(
    prefect_harness, tracking, tmp_path, monkeypatch, capsys
):
    from fedcore.cli import main
    from fedcore.flows.sweep import sweep

    path = _sweep_file(tmp_path)
    first = sweep(str(path))
    assert [r["status"] for r in first] == ["finished"]
    assert [r["run_id"] for r in sweep(str(path))] == [first[0]["run_id"]]  # same code: skipped
    spec = load_sweep(path)
    configs = [c.config for c in spec.cells]
    assert other_code_note(configs) is None

    _other_code(monkeypatch, "c0dechange01")
    note = other_code_note(configs)  # the line the flow prints (Prefect's log of its prints)
    assert note.startswith("1 cells have finished runs made by other code (commit ")
    assert note.endswith("); running them again")
    second = sweep(str(path))
    assert [r["status"] for r in second] == ["finished"]
    assert second[0]["run_id"] != first[0]["run_id"]
    report = build_report(spec, tmp_path / "report")
    assert list(report.runs["run_id"]) == [second[0]["run_id"]]
    assert list(report.runs["code_digest"]) == ["c0dechange01"]

    _other_code(monkeypatch, "c0dechange02")
    assert other_code_note(configs, reused=True).endswith("; reusing them (--reuse-other-code)")
    capsys.readouterr()
    assert main(["sweep", str(path), "--reuse-other-code"]) == 0
    assert "skipped" in capsys.readouterr().out
    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    cells = [r for r in client.search_runs([exp], "tags.sweep = 'codever'")
             if "config_hash" in r.data.tags]
    assert len(cells) == 2  # no new run: the newest run of any code was reused
    assert sweep(str(path), reuse_other_code=True)[0]["run_id"] == second[0]["run_id"]


@pytest.mark.slow
def test_report_tables_this_codes_runs_and_warns_on_mixed_code(tracking, tmp_path, monkeypatch,
                                                                 capsys):
    path = _sweep_file(tmp_path, seeds=(0, 1))
    spec = load_sweep(path)
    old = {}
    with monkeypatch.context() as m:
        _other_code(m, "01dc0de00000")
        for cell in spec.cells:
            old[cell.config.seed] = run_tracked(cell.config, tags={"sweep": spec.name})[0]
    with pytest.raises(LookupError, match="2 have FINISHED runs of other code"):
        build_report(spec, tmp_path / "none")

    new, _ = run_tracked(spec.cells[0].config, tags={"sweep": spec.name})
    report = build_report(spec, tmp_path / "current")
    assert list(report.runs["run_id"]) == [new]
    md = (tmp_path / "current" / "table.md").read_text()
    assert ("2 cells planned: 1 finished, 0 diverged or failed (kept in their rows), 1 not yet "
            "run") in md
    assert f"Rows: runs made by this code {code_digest.current()} (" in md
    assert "Warning" not in md
    csv = pd.read_csv(tmp_path / "current" / "runs.csv", dtype=str, keep_default_na=False)
    assert list(csv["code_digest"]) == [code_digest.current()]
    assert {"commit", "dirty"} <= set(csv.columns)

    mixed = build_report(spec, tmp_path / "any", any_code=True)
    assert list(mixed.runs["run_id"]) == [new, old[1]]
    md = (tmp_path / "any" / "table.md").read_text()
    assert "2 cells planned: 2 finished, 0 diverged or failed (kept in their rows).\n" in md
    warning = [line for line in md.splitlines() if "Warning" in line]
    assert len(warning) == 1 and "2 versions of the code" in warning[0]
    assert "1 by code 01dc0de00000" in md
    csv = pd.read_csv(tmp_path / "any" / "runs.csv", dtype=str, keep_default_na=False)
    assert list(csv["code_digest"]) == [code_digest.current(), "01dc0de00000"]

    from fedcore.cli import main

    capsys.readouterr()
    assert main(["report", str(path), "--any-code", "--out", str(tmp_path / "cli")]) == 0
    assert "2 versions of the code" in capsys.readouterr().out
