"""Where fedcore finds its project folder and its shipped configs."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # fedcore/ (this file: fedcore/core/config/)
PACKAGED_CONFIGS = PACKAGE_DIR / "_configs"  # configs/ inside a wheel


def checkout_root() -> Path | None:
    """The source checkout this package runs from (configs/ and pyproject.toml beside the
    package), or None for an installed wheel."""
    here = PACKAGE_DIR.parent
    return here if (here / "configs").is_dir() and (here / "pyproject.toml").is_file() else None


def project_root() -> Path:
    """The project folder (mlflow.yml, stores, reports): $FEDCORE_HOME, else the checkout,
    else the current folder."""
    if os.environ.get("FEDCORE_HOME"):
        return Path(os.environ["FEDCORE_HOME"]).resolve()
    return checkout_root() or Path.cwd()


def config_dir() -> Path:
    """The shipped configs: ``$FEDCORE_HOME/configs`` when that folder exists, else the
    checkout's configs/, else the copy inside the installed package (``fedcore/_configs``)."""
    if os.environ.get("FEDCORE_HOME"):
        home = Path(os.environ["FEDCORE_HOME"]).resolve() / "configs"
        if home.is_dir():
            return home
    root = checkout_root()
    return root / "configs" if root is not None else PACKAGED_CONFIGS


def writable_config_dir() -> Path:
    """Where ``fedcore tune --best`` writes by default: `config_dir`, except that the copy
    inside an installed package is never written (``<project_root>/configs`` instead)."""
    folder = config_dir()
    return project_root() / "configs" if folder == PACKAGED_CONFIGS else folder
