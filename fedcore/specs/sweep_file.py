"""The shape of a sweep file, checked before any cell is built: each key's type, a safe sweep
name, and no grid key that ``set`` also sets; and the base experiment that a sweep, claims or
study file names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fedcore.core.config import ConfigError, limits, read_yaml

SWEEP_KEYS = ("name", "base", "grid", "set", "studies", "seeds", "families", "confirms",
              "protocols")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME_RULE = ("1-100 letters, digits, '.', '_' or '-', starting with a letter or digit "
             "(one folder under reports/)")


def check_shape(spec: dict[str, Any], path: Path) -> list[dict[str, list[Any]]]:
    """Check the sweep file's keys and their types; returns its grid as a list of mappings.

    Raises a one-line ``ConfigError`` naming the file or the key and the expected type.
    """
    if not spec:
        raise ConfigError(f"sweep file {str(path)!r} is empty; expected a mapping with a grid "
                          f"(keys: {', '.join(SWEEP_KEYS)})")
    unknown = set(spec) - set(SWEEP_KEYS)
    if unknown:
        raise ConfigError(
            f"sweep: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(SWEEP_KEYS)}"
        )
    for key in ("name", "base"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise ConfigError(f"sweep.{key}: expected a string (got {_kind(spec[key])})")
    if spec.get("set") is not None and not isinstance(spec["set"], dict):
        raise ConfigError(f"sweep.set: expected a mapping of KEY: value (got {_kind(spec['set'])})")
    grid = spec.get("grid")
    if not grid:
        raise ConfigError(f"sweep.grid: missing or empty in {str(path)!r}; expected a mapping of "
                          "KEY: [non-empty list of values], or a list of such mappings")
    grids = grid if isinstance(grid, list) else [grid]
    for g in grids:
        if not isinstance(g, dict) or not g or any(
            not isinstance(v, list) or not v for v in g.values()
        ):
            raise ConfigError("sweep.grid: expected a mapping of KEY: [non-empty list of values], "
                              "or a list of such mappings")
    return grids


def check_entry_keys(entry: Any, allowed: tuple[str, ...], at: str) -> dict[str, Any]:
    """One entry of a sweep file's list or mapping (a family, a protocol): a mapping whose keys
    are all in ``allowed``; one-line errors naming ``at`` and the allowed keys."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{at}: expected a mapping with keys {', '.join(allowed)}")
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ConfigError(f"{at}: unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}")
    return entry


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}: {str(value)[:40]!r}"


def sweep_name(raw: str | None, path: Path) -> str:
    """The sweep's name (``name``, else the file's stem): one safe path component, since
    ``fedcore report`` writes into ``reports/<name>``."""
    name = raw if raw else path.stem
    if not NAME_PATTERN.fullmatch(name) or name in (".", ".."):
        where = "sweep.name" if raw else f"sweep file {str(path)!r}: its stem (the sweep's name)"
        raise ConfigError(f"{where}: {name[:100]!r} is not a valid sweep name; allowed: "
                          f"{NAME_RULE}")
    return name


def _overlap(a: str, b: str) -> bool:
    """Whether setting ``b`` after ``a`` changes what ``a`` set (same key, or one holds the
    other); ``method`` and ``method.*`` combine (the method is loaded first)."""
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    return long.startswith(short + ".") and short != "method"


def check_grid_keys(grids: list[dict[str, list[Any]]], fixed: dict[str, Any]) -> None:
    """Refuse a grid key that ``set`` would silently replace in every cell. (A command-line
    override may replace a grid key on purpose, e.g. ``checkpoint_dir`` of a broken folder.)"""
    for g in grids:
        for key in g:
            other = next((k for k in fixed if _overlap(str(key), str(k))), None)
            if other is not None:
                raise ConfigError(
                    f"sweep.grid.{key}: also set by set ({other}), which would replace the "
                    "grid's values in every cell; remove it from one of them"
                )


def read_base(base: str | None, owner: Path) -> dict[str, Any]:
    """The base experiment YAML named by a sweep or study file (relative to that file). It must
    end in ``.yaml`` or ``.yml``: a shared file naming ``base: /etc/shadow`` had its first line
    echoed in the error about its unknown key."""
    if not base:
        return {}
    if Path(base).suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError(f"base: {limits.shown(base)} in {limits.shown(owner.name)} is not a "
                          ".yaml or .yml file; allowed: an experiment config's YAML file")
    base_path = Path(base)
    if not base_path.is_absolute():
        base_path = owner.parent / base_path
    return read_yaml(base_path)
