"""docs/notebooks/python-api.ipynb, the notebook twin of docs/python-api.md: valid nbformat 4
JSON, its code cells the page's ```python blocks (so the two cannot drift), and they run, in
order, in an empty folder (no Jupyter needed: the cells are executed as the page's blocks are)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python-api.md"
NOTEBOOK = ROOT / "docs" / "notebooks" / "python-api.ipynb"


def _notebook() -> dict:
    return json.loads(NOTEBOOK.read_text())


def _code(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_the_notebook_is_nbformat_4_and_the_generators_output():
    nb = _notebook()
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 4
    assert nb["metadata"]["kernelspec"]["language"] == "python"
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["source"], list)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_notebook.py"),
                           "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_its_code_cells_are_the_pages_python_blocks():
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert len(blocks) >= 4
    assert _code(_notebook()) == [b.rstrip("\n") for b in blocks]
    markdown = "".join("".join(c["source"]) for c in _notebook()["cells"]
                       if c["cell_type"] == "markdown")
    assert "## Callbacks: watch the rounds, add metrics, stop" in markdown


def test_the_notebook_runs(tracking, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "python_api_notebook"}
    for i, source in enumerate(_code(_notebook())):
        exec(compile(source, f"{NOTEBOOK.name} cell {i + 1}", "exec"), namespace)
    assert namespace["result"].config["dataset"]["name"] == "blobs"  # type: ignore[attr-defined]
    assert (tmp_path / "tiny.yaml").is_file() and "short" in namespace  # every cell ran
