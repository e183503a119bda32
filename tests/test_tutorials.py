"""The tutorials' code, run as written: each titled code block becomes its file in a copy of the
project (rules and objectives are imported from there and registered), then the tutorial's own
check script runs and a short simulation uses the new method (docs/tutorials/)."""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedcore.core.aggregators.base import REGISTRY as RULES
from fedcore.core.clients.base import REGISTRY as CLIENTS
from fedcore.core.component.registry import Registry
from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation

pytestmark = pytest.mark.slow  # trains two rounds (see docs/how-to/tests.md)
ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r'^```(?:python|yaml) title="([^"]+)"\n(.*?)^```', re.M | re.S)
TINY = ["rounds=2", "model.name=mlp", "dataset.num_clients=6", "clients_per_round=3",
        "local.steps=2"]


def blocks(page: str) -> dict[str, str]:
    """The code blocks of a tutorial with a ``title="path"``, by path."""
    text = (ROOT / "docs" / "tutorials" / page).read_text()
    return {path: body for path, body in BLOCK.findall(text)}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with the shipped configs, used as FEDCORE_HOME."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.setenv("FEDCORE_HOME", str(tmp_path))
    return tmp_path


@contextlib.contextmanager
def install(project: Path, files: dict[str, str], registry: Registry, name: str) -> Iterator[None]:
    """Write the tutorial's files into ``project`` and import its module (registering ``name``)."""
    for rel, body in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(body)
    registry.names()  # load the shipped entries first
    module = next(rel for rel in files if rel.startswith("fedcore/"))
    spec = importlib.util.spec_from_file_location(f"tutorial_{name}", project / module)
    assert spec is not None and spec.loader is not None
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        yield
    finally:
        registry._entries.pop(name, None)
        sys.modules.pop(f"tutorial_{name}", None)


def run_script(project: Path, rel: str) -> None:
    exec(compile((project / rel).read_text(), str(project / rel), "exec"), {"__name__": "__main__"})


def test_server_rule_tutorial_runs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = blocks("server-rule.md")
    assert set(files) == {"fedcore/core/aggregators/fedadam.py", "configs/methods/fedadam.yaml",
                          "check_fedadam.py"}
    with install(project, files, RULES, "fedadam"):
        run_script(project, "check_fedadam.py")
        assert "first step:" in capsys.readouterr().out
        sim = Simulation(load_config(None, ["method=fedadam", *TINY]))
        result = sim.run()
        assert 0.0 <= result.summary["final/accuracy"] <= 1.0
        state = sim.aggregator.state_dict()
        assert set(state) == {"m", "v"} and state["m"].shape == sim.params.shape


def test_client_objective_tutorial_runs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = blocks("client-objective.md")
    assert set(files) == {"fedcore/core/clients/label_smoothing.py",
                          "configs/methods/fedavg_ls.yaml",
                          "check_label_smoothing.py"}
    with install(project, files, CLIENTS, "label_smoothing"):
        run_script(project, "check_label_smoothing.py")
        assert "sequential" in capsys.readouterr().out
