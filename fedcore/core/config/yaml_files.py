"""Reading a config file's mapping within the limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedcore.core.config import limits, safe_yaml
from fedcore.core.config.errors import ConfigError


def read_yaml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """The mapping in the YAML file ``path``, read within `fedcore.core.config.limits` (no duplicate
    keys, bounded aliases and depth, UTF-8); ``what`` names the file in errors."""
    data = safe_yaml.read_file(path, what) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {limits.shown(str(path))} must hold a mapping")
    try:
        limits.check_tree(data)
    except ConfigError as exc:
        raise ConfigError(f"{what} {limits.shown(str(path))}: {exc}") from None
    return data
