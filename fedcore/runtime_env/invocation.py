"""How this process was started, for the commands fedcore prints as hints."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def fedcore_command() -> str:
    """The command that runs fedcore the way this process was run: ``.venv/bin/fedcore`` (the
    console script, relative to the working directory), ``fedcore`` when that is what PATH
    finds, or ``<python> -m fedcore``; a hint printed with it copy-pastes as it is."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "fedcore" and argv0.exists():
        on_path = shutil.which("fedcore")
        if on_path is not None and Path(on_path).resolve() == argv0.resolve():
            return "fedcore"
        return _shell_path(argv0)
    return f"{_shell_path(Path(sys.executable))} -m fedcore"


def _shell_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    resolved = Path(os.path.abspath(path))
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)
