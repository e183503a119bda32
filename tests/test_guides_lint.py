"""The guides' code held to the project's gates: every titled Python block of the tutorials and
of the how-tos that paste code is written to the file it says to create, then checked with
``ruff check`` (the project's configuration) and ``mypy --strict``, as the package is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BLOCK = re.compile(r'^```python title="([^"]+)"\n(.*?)^```', re.M | re.S)
# a block whose first line names its file: ``# fedcore-normclip/fedcore_normclip/rules.py``
NAMED = re.compile(r"^```python\n(# [\w.-]+/([\w./-]+\.py)\n.*?)^```", re.M | re.S)
# the pages whose code a reader pastes
GUIDES = ("tutorials/server-rule.md", "tutorials/client-objective.md", "how-to/add-a-stage.md",
          "how-to/add-a-sampler.md", "how-to/add-a-callback.md", "how-to/plugins.md")


def python_files(page: str) -> dict[str, str]:
    """The Python blocks of a guide that name their file (a title, or a first-line comment
    ``# <package folder>/<path>``), by the path they say to create."""
    text = (ROOT / "docs" / page).read_text()
    return {**dict(BLOCK.findall(text)), **{path: body for body, path in NAMED.findall(text)}}


def paste(page: str, where: Path) -> list[Path]:
    """Write the guide's Python files under ``where`` at their paths; the paths written."""
    out = []
    for rel, body in python_files(page).items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        out.append(path)
    return out


def gate(*args: str | Path) -> str:
    """Run one of the project's gates from the repository root; its output when it fails."""
    done = subprocess.run([str(a) for a in args], cwd=ROOT, capture_output=True, text=True)
    return "" if done.returncode == 0 else done.stdout + done.stderr


def test_every_guide_pastes_python() -> None:
    assert all(python_files(page) for page in GUIDES)


@pytest.mark.parametrize("page", GUIDES)
def test_guide_code_passes_ruff(page: str, tmp_path: Path) -> None:
    files = paste(page, tmp_path)
    failure = gate(BIN / "ruff", "check", "--no-cache", "--config", ROOT / "pyproject.toml",
                   *files)
    assert not failure, f"{page}:\n{failure}"


@pytest.mark.slow  # mypy on a cold cache reads the package first (see docs/how-to/tests.md)
@pytest.mark.parametrize("page", GUIDES)
def test_guide_code_passes_mypy_strict(page: str, tmp_path: Path) -> None:
    # each file is checked as a top-level module (its folder holds no __init__.py), so its
    # imports of fedcore resolve to this checkout, as they would once pasted into it
    files = paste(page, tmp_path)
    failure = gate(BIN / "mypy", "--strict", "--config-file", ROOT / "pyproject.toml",
                   "--no-error-summary", *files)
    assert not failure, f"{page}:\n{failure}"


def test_docs_index_links_every_guide() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    for page in GUIDES:
        assert f"]({page})" in index, page


def test_no_sphinx_role_in_the_package() -> None:
    # the API reference renders Google-style docstrings: a role prints literally
    role = re.compile(r":(?:meth|class|func|attr|mod|data|exc|obj):`")
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "fedcore").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if role.search(line)]
    assert not hits, f"Sphinx roles (write ``name`` instead): {hits}"
