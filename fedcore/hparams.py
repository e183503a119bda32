"""Whether a run's method runs at its paper's hyperparameters or at tuned ones.

The shipped method files (``configs/methods/<name>.yaml``) hold each method's paper defaults. A
run's method is ``paper`` when it resolves to exactly that file's method, and ``tuned`` when any
hyperparameter differs (set by a study's best trial or by hand), when no shipped file has its
name, or when its file was written by ``fedcore tune --best``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fedcore.config import ConfigError, build_config, config_dir

TUNE_BEST_MARK = "Written by `fedcore tune --best`"


@cache
def _paper_method(name: str, folder: str) -> dict[str, Any] | None:
    path = config_dir() / "methods" / f"{name}.yaml"
    if not path.is_file() or TUNE_BEST_MARK in path.read_text():
        return None
    try:
        resolved = build_config({"method": name, "model": {"name": "mlp"}}).resolved()
    except ConfigError:
        return None
    method: dict[str, Any] = resolved["method"]
    return method


def paper_method(name: str) -> dict[str, Any] | None:
    """The resolved method of ``configs/methods/<name>.yaml`` (None: no paper file)."""
    return _paper_method(name, str(config_dir()))


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def hparams_changes(method: dict[str, Any]) -> dict[str, Any]:
    """The keys of a resolved ``method`` whose values differ from its paper file, with the
    run's values (``{"aggregator.server_lr": 0.7}``); every key when there is no paper file."""
    paper = paper_method(str(method["name"]))
    mine = _flat({k: v for k, v in method.items() if k != "name"})
    if paper is None:
        return mine
    theirs = _flat({k: v for k, v in paper.items() if k != "name"})
    return {k: v for k, v in mine.items() if theirs.get(k, object()) != v}


def hparams_label(method: dict[str, Any]) -> str:
    """``paper`` or ``tuned`` (see the module docstring) for a resolved method mapping."""
    paper = paper_method(str(method["name"]))
    return "paper" if paper is not None and not hparams_changes(method) else "tuned"


def hparams_tags(method: dict[str, Any]) -> dict[str, str]:
    """MLflow tags: ``hparams`` (paper | tuned) and, when tuned, ``hparams_changed``."""
    label = hparams_label(method)
    tags = {"hparams": label}
    if label == "tuned" and paper_method(str(method["name"])) is not None:
        tags["hparams_changed"] = ", ".join(f"{k}={v}" for k, v in hparams_changes(method).items())
    return tags
