"""docs/python-api.md runs as written: its ```python blocks, in order, in an empty folder."""

from __future__ import annotations

import re
from pathlib import Path

import fedcore

PAGE = Path(fedcore.__file__).resolve().parent.parent / "docs" / "python-api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_python_api_page_code_blocks_run(tracking, tmp_path, monkeypatch):
    text = PAGE.read_text()
    blocks = python_blocks(text)
    assert len(blocks) >= 3  # own data and model, tracked run and model back, sweep results
    assert len(blocks) == text.count("```python")  # every block closed, so every block runs
    assert len(re.findall(r"^```", text, flags=re.M)) % 2 == 0  # no fence left open
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "python_api_doc"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{PAGE.name} block {i + 1}", "exec"), namespace)
    result = namespace["result"]
    assert result.config["dataset"]["name"] == "blobs"  # type: ignore[attr-defined]
    assert "weights" not in result.config["model"]  # type: ignore[attr-defined]  (a class)
    assert "short" in namespace  # the last block (callbacks) ran
