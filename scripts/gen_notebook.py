"""Write docs/notebooks/python-api.ipynb, the notebook twin of docs/python-api.md: the page's
prose as Markdown cells and its ```python blocks as code cells, in order (nbformat 4, no
outputs). tests/test_python_api_notebook.py checks that the notebook is this script's output
and runs its code cells.

    .venv/bin/python scripts/gen_notebook.py           # write it
    .venv/bin/python scripts/gen_notebook.py --check   # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python-api.md"
NOTEBOOK = ROOT / "docs" / "notebooks" / "python-api.ipynb"
BLOCK = re.compile(r"^```python\n(.*?)^```\n?", flags=re.S | re.M)
NOTE = ("*The notebook twin of [the Python API page](../python-api.md), generated from it by "
        "`scripts/gen_notebook.py`; run it from an empty folder (it writes `tiny.yaml` and "
        "records runs in the MLflow store of `mlflow.yml` or `MLFLOW_TRACKING_URI`).*")


def _lines(text: str) -> list[str]:
    """A cell's source as nbformat stores it: lines that keep their newline, the last without."""
    return text.splitlines(keepends=True)


def cells(page: str) -> list[dict[str, Any]]:
    """The page as cells: each stretch of prose a Markdown cell, each ```python block a code
    cell."""
    out: list[dict[str, Any]] = []
    at = 0
    for match in BLOCK.finditer(page):
        prose = page[at:match.start()].strip("\n")
        if prose:
            out.append({"cell_type": "markdown", "metadata": {}, "source": _lines(prose)})
        out.append({"cell_type": "code", "execution_count": None, "metadata": {},
                    "outputs": [], "source": _lines(match.group(1).rstrip("\n"))})
        at = match.end()
    tail = page[at:].strip("\n")
    if tail:
        out.append({"cell_type": "markdown", "metadata": {}, "source": _lines(tail)})
    if out and out[0]["cell_type"] == "markdown":  # the note under the page's title
        title, _, rest = "".join(out[0]["source"]).partition("\n")
        rest = rest.replace(f"[{NOTEBOOK.name}](notebooks/{NOTEBOOK.name})", "this notebook")
        out[0]["source"] = _lines(f"{title}\n\n{NOTE}\n{rest}")
    return out


def notebook(page: str) -> dict[str, Any]:
    """The nbformat 4 notebook of ``page``."""
    return {
        "cells": cells(page),
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 4,
    }


def render(page: str) -> str:
    """The notebook file's text (JSON, indented, one trailing newline)."""
    return json.dumps(notebook(page), indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the notebook is stale")
    args = parser.parse_args()
    text = render(PAGE.read_text())
    if args.check:
        if not NOTEBOOK.is_file() or NOTEBOOK.read_text() != text:
            print(f"gen_notebook: stale: {NOTEBOOK.relative_to(ROOT)} (run .venv/bin/python "
                  "scripts/gen_notebook.py)", file=sys.stderr)
            return 1
        return 0
    NOTEBOOK.parent.mkdir(parents=True, exist_ok=True)
    NOTEBOOK.write_text(text)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
