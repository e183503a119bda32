"""The optional ``pipeline`` extra (MLflow, Prefect, Optuna, Dask): what is missing, and one
line that names the extra to install.

The core (simulations, methods, data, configs) installs without it; ``fedcore run`` then runs
untracked, and the commands built on the pipeline (sweep, tune, report, claims, ui) stop before
any work with ``MissingExtraError``.
"""

from __future__ import annotations

from importlib.util import find_spec

from fedcore.core.config import ConfigError

EXTRA = "pipeline"
INSTALL = f"pip install 'fedcore-fl[{EXTRA}]'"
# The modules each command imports (import names, not distribution names).
NEEDS = {
    "run": ("mlflow",),
    "sweep": ("mlflow", "prefect", "dask", "distributed", "prefect_dask"),
    "report": ("mlflow", "matplotlib", "pyarrow"),
    "tune": ("mlflow", "optuna", "prefect"),
    "claims": ("mlflow", "matplotlib"),
    "ui": ("mlflow",),
}


class MissingExtraError(ConfigError):
    """A command needs the pipeline extra, which is not installed (exit code 2)."""


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (looked up, not imported)."""
    return [m for m in modules if not _found(m)]


def _found(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken module entry
        return False


def require(command: str) -> None:
    """Raise ``MissingExtraError`` when ``fedcore <command>`` lacks a module it needs."""
    require_modules(f"fedcore {command}", NEEDS.get(command, ()))


def require_modules(what: str, modules: tuple[str, ...]) -> None:
    """Raise ``MissingExtraError`` (``<what> needs the pipeline extra (missing: ...);
    install it with ...``) when a module of ``modules`` is not installed."""
    absent = missing(modules)
    if absent:
        raise MissingExtraError(
            f"{what} needs the {EXTRA} extra (missing: {', '.join(absent)}); "
            f"install it with {INSTALL}"
        )
