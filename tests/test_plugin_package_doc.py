"""The minimal plugin package of docs/how-to/plugins.md works as the page shows: its files,
written from the page's code blocks, make a package whose pyproject declares the rule
``normclip`` as an entry point, and the page's ``fedcore run`` trains with it.

The package is made importable as ``pip install -e`` would (its folder on ``sys.path`` and a
``.dist-info`` holding ``entry_points.txt`` built from the pyproject's
``[project.entry-points]``), not by pip, which would change the environment every other test
shares; the test removes both afterwards."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib
from mlflow.tracking import MlflowClient

from fedcore.cli import main
from fedcore.core.aggregators.base import REGISTRY as RULES
from fedcore.core.compose import plugins

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "how-to" / "plugins.md"
FOLDER = "fedcore-normclip"


def page_files() -> dict[str, str]:
    """The package's files: each code block whose first line is ``# fedcore-normclip/<path>``."""
    blocks = re.findall(r"^```(?:toml|python)\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    files = {}
    for block in blocks:
        first, _, _ = block.partition("\n")
        if first.startswith(f"# {FOLDER}/"):
            files[first.removeprefix("# ")] = block
    return files


def page_command() -> list[str]:
    """The ``fedcore run`` line of the page's bash block, as arguments after ``fedcore``."""
    bash = re.search(r"^```bash\n(.*?)^```", PAGE.read_text().split("## A minimal plugin")[1],
                     flags=re.S | re.M)
    assert bash is not None
    lines = bash.group(1).replace("\\\n", " ").splitlines()
    assert lines[0] == f"pip install -e ./{FOLDER}"
    return shlex.split(lines[1])[1:]


def _forget(package: str) -> None:
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[name]
    plugins.package_source.cache_clear()
    plugins.package_files.cache_clear()
    plugins._all_distributions.cache_clear()
    for name in [n for n, c in RULES.classes().items() if not plugins.in_tree(c)]:
        del RULES._external[name]
    RULES.refresh()


@pytest.fixture
def installed(tmp_path) -> Iterator[Path]:
    """The page's package written to ``tmp_path`` and importable with its entry points."""
    files = page_files()
    assert set(files) == {f"{FOLDER}/pyproject.toml", f"{FOLDER}/fedcore_normclip/__init__.py",
                          f"{FOLDER}/fedcore_normclip/rules.py"}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    project = tomllib.loads(files[f"{FOLDER}/pyproject.toml"])["project"]
    rule = (tmp_path / FOLDER / "fedcore_normclip" / "rules.py").read_text()
    assert len(rule.splitlines()) <= 24  # a rule of about 20 lines (typed: `hp: HParams`)
    info = tmp_path / FOLDER / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in project["entry-points"].items()))
    sys.path.insert(0, str(tmp_path / FOLDER))
    _forget("fedcore_normclip")
    yield tmp_path / FOLDER
    sys.path.remove(str(tmp_path / FOLDER))
    _forget("fedcore_normclip")


def test_the_pages_package_declares_the_rule_and_the_pages_command_runs_it(
        installed, tracking, capsys):
    assert "normclip" in RULES.names()
    args = page_command()
    assert args[:2] == ["run", "method=fedavg"] and "rounds=10" in args
    tiny = ["rounds=2", "dataset.num_clients=6", "clients_per_round=3", "local.epochs=1",
            "local.steps=2"]
    assert main([*args, *tiny]) == 0
    run_id = re.search(r"MLflow run ([0-9a-f]{32})", capsys.readouterr().out)
    assert run_id is not None
    run = MlflowClient(tracking.tracking_uri).get_run(run_id.group(1))
    assert "normclip/cut" in run.data.metrics
    assert "normclip = fedcore_normclip.rules:NormClip" in run.data.tags["fedcore.plugins"]


def test_without_the_package_the_rule_is_refused_in_one_line(tracking, capsys):
    assert "normclip" not in RULES.names()
    assert main([*page_command(), "rounds=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown 'normclip'; allowed:" in err[0]
