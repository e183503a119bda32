"""The first minute (docs/tutorials/quickstart.md): ``fedcore run`` says where it recorded its
run (the store's file, the run id, and ``fedcore ui``); the page shows the command, its output
as the CLI prints it, and comes first among the tutorials."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from fedcore.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "tutorials" / "quickstart.md"
COMMAND = "fedcore run method=fedavg model.name=mlp rounds=10"
TINY = ["dataset.num_clients=6", "clients_per_round=3", "local.epochs=1", "local.steps=2"]


def _run(capsys) -> str:
    assert main([*COMMAND.split()[1:], "rounds=2", *TINY]) == 0
    return capsys.readouterr().out


def test_run_prints_the_store_its_run_was_recorded_in(tracking, tmp_path, capsys):
    out = _run(capsys)
    run_id = re.search(r"^MLflow run ([0-9a-f]{32})  method=fedavg", out, flags=re.M)
    assert run_id is not None
    store = tmp_path / "mlflow.db"
    assert (f"stored in {store} (MLflow store sqlite:///{store}, experiment 'fedcore', "
            f"run {run_id.group(1)})") in out
    assert "\nbrowse it: fedcore ui " in out


def test_the_page_shows_the_command_and_what_it_prints(tracking, capsys):
    text = PAGE.read_text()
    assert f"```bash\n{COMMAND}\n```" in text and "```bash\nfedcore ui\n```" in text
    shown = re.search(r"^```text\n(MLflow run .*?)^```", text, flags=re.S | re.M)
    assert shown is not None
    metrics = re.findall(r"^([a-z_0-9]+/[a-z_0-9]+) +\d", shown.group(1), flags=re.M)
    printed = re.findall(r"^([a-z_0-9]+/[a-z_0-9]+) +-?\d", _run(capsys), flags=re.M)
    assert metrics == printed  # the page's table is the one the CLI prints, in its order
    assert "stored in " in shown.group(1) and "browse it: fedcore ui" in shown.group(1)
    assert re.search(r"took \d+ s from a fresh store", text)  # the measured time is stated


def test_the_quickstart_is_the_first_tutorial():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    tutorials = next(item["Tutorials"] for item in nav if "Tutorials" in item)
    assert list(tutorials[0].values()) == ["tutorials/quickstart.md"]
