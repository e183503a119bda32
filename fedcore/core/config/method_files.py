"""The method files: shipped method names and loading one by name or path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedcore.core.config import limits
from fedcore.core.config.errors import ConfigError
from fedcore.core.config.paths import config_dir
from fedcore.core.config.yaml_files import read_yaml


def method_names() -> list[str]:
    """The names of the shipped methods (configs/methods/*.yaml), sorted."""
    return sorted(p.stem for p in (config_dir() / "methods").glob("*.yaml"))


def load_method(name: str) -> dict[str, Any]:
    """The method named ``name`` in configs/methods, or the method file at an explicit path.

    A name is a plain file stem there (no ``/``, ``\\`` or ``..``); anything else must be the
    path of an existing ``.yaml`` file, e.g. ``method=./my_methods/fedx.yaml``.
    """
    if name.endswith((".yaml", ".yml")):
        limits.check_path("method", name)
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigError(f"method: method file {limits.shown(name)} does not exist")
        spec = read_yaml(path, "method file")
        spec.pop("docs", None)  # what the docs say of it (method_docs), not part of the method
        spec.setdefault("name", path.stem)
        return spec
    limits.check_string("method", name, limits.NAME_CHARS)
    if not name or any(part in name for part in ("/", "\\", "..")) or name.startswith("~"):
        raise ConfigError(
            f"method: {limits.shown(name)} is not a method name (names resolve inside "
            "configs/methods; "
            "give a method file as a path ending in .yaml); "
            f"allowed: {', '.join(method_names())}"
        )
    path = config_dir() / "methods" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"method: unknown method {limits.shown(name)}; allowed: {', '.join(method_names())}"
        )
    spec = read_yaml(path, "method file")
    spec.pop("docs", None)  # what the docs say of it (method_docs), not part of the method
    spec.setdefault("name", name)
    return spec
