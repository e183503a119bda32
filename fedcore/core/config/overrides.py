"""``KEY=VALUE`` overrides: parsing them and setting a dotted key in a tree."""

from __future__ import annotations

from typing import Any

from fedcore.core.config import limits, safe_yaml
from fedcore.core.config.errors import ConfigError


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": 1, "c": "x"}`` with YAML-typed values."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {limits.shown(item)}: expected KEY=VALUE, e.g. rounds=50")
        key, value = item.split("=", 1)
        if not key:
            raise ConfigError(f"override {limits.shown(item)}: empty key")
        limits.check_string("override key", key)
        limits.check_string(key.strip(), value)
        source = f"override {limits.shown(item)}"
        out[key.strip()] = safe_yaml.load(value, source) if value != "" else None
    return out


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` of ``tree`` to ``value``, making the blocks on its way."""
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
