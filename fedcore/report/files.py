"""Writing a report's files: all of them or none (a full disk leaves the previous report as it
was), each text file through a temporary file and a rename."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedcore.core.runtime import faults


def write_all(out: Path, write: Callable[[Path], Any]) -> list[Path]:
    """Write every file of a report (``write(folder)``) into a temporary folder next to
    ``out``, then move each into ``out``: a failure (a full disk) leaves the previous report as
    it was, no half one, and its error names the file (``no space left on device writing
    report file <path>``). Returns the files, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    before: set[str] = set()
    try:
        try:
            write(stage)
        except BaseException as exc:
            if faults.is_disk_full(exc):
                written = sorted(stage.iterdir(), key=lambda p: p.stat().st_mtime)
                name = written[-1].name if written else "table.md"
                raise faults.no_space(f"report file {out / name}") from None
            raise
        names = sorted(p.name for p in stage.iterdir() if p.is_file())
        before.update(names)
        for name in names:
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [out / name for name in sorted(before)]


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (no half file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
