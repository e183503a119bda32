"""Components from the user's own package: entry points, import paths, and where they come from.

A config names a rule, client objective or compressor by a built-in name, by the name of an
entry point of the groups in ``GROUPS`` (a distribution's metadata, discovered lazily), or by
an import path ``module:Class``. Out-of-tree classes are checked to subclass fedcore's base
class. ``sources`` tells which packages outside fedcore a method's components come from:
their files' digest (part of the run's code digest), distribution, version and git commit.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as metadata
import importlib.util
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcore.core.component.loading import GROUPS as GROUPS
from fedcore.core.component.loading import ComponentError as ComponentError
from fedcore.core.component.loading import entry_points as entry_points
from fedcore.core.component.loading import files_digest as files_digest
from fedcore.core.component.loading import import_object as import_object
from fedcore.core.component.loading import in_tree as in_tree
from fedcore.core.component.loading import load_entry_point as load_entry_point
from fedcore.core.component.loading import load_import_path as load_import_path
from fedcore.core.component.loading import package_files as package_files


@dataclass(frozen=True)
class PackageSource:
    """A package outside fedcore that a run's components come from."""

    package: str  # top-level import name
    root: str  # the sys.path entry holding it
    files_digest: str  # sha256 of its .py files (relative path, length, bytes)
    distribution: str | None = None
    version: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def _all_distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()  # every installed distribution: read once


def _distribution(package: str, root: Path) -> tuple[str | None, str | None]:
    """The distribution that installs ``package``: one whose metadata lies in ``root`` (an
    ordinary install, quick), else any on ``sys.path`` (an editable install)."""
    for dist in metadata.distributions(path=[str(root)]):
        top = (dist.read_text("top_level.txt") or "").split()
        if package in top or any(f.parts[0] == package for f in dist.files or []):
            return dist.metadata["Name"], dist.version
    names = _all_distributions().get(package, [])
    if not names:
        return None, None
    try:
        return names[0], metadata.version(names[0])
    except metadata.PackageNotFoundError:
        return names[0], None


@functools.cache
def package_source(package: str) -> PackageSource:
    """Where ``package`` comes from, read once per process (the code this process loaded)."""
    root, files, digest = package_files(package)
    folder = files[0].parent if files else root
    commit = _git(folder, "rev-parse", "HEAD")
    dirty = None
    if commit:
        status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".")
        dirty = None if status is None else bool(status)
    dist, version = _distribution(package, root)
    return PackageSource(package, str(root), digest, dist, version, commit, dirty)


@dataclass(frozen=True)
class Component:
    """One out-of-tree component of a method: how the config names it and where it lives."""

    kind: str
    name: str  # as the config names it: an entry point name or module:Class
    target: str  # module:qualname of the class
    package: str


def _specs(spec: Mapping[str, Any], key: str) -> Iterator[str]:
    """Every ``key`` value in ``spec`` and in mappings nested in it (Ditto's ``inner``)."""
    if isinstance(spec.get(key), str):
        yield spec[key]
    for value in spec.values():
        if isinstance(value, Mapping):
            yield from _specs(value, key)


def components(method: Mapping[str, Any]) -> list[Component]:
    """The out-of-tree components of a method mapping (the specs of every axis under
    ``method``: client, aggregator, compression, sampler, stages), in config order."""
    found: dict[tuple[str, str], Component] = {}
    for field, registry in _axes():
        specs = method.get(field)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, Mapping):
                _add_components(found, spec, registry)
    return list(found.values())


def _axes() -> list[tuple[str, Any]]:
    """(method key, registry) of every axis a method names (``fedcore.core.compose.axes``)."""
    from fedcore.core.compose.axes import AXES

    return [(axis.where.removeprefix("method."), axis.registry) for axis in AXES
            if axis.where.startswith("method.")]


def _add_components(
    found: dict[tuple[str, str], Component], spec: Mapping[str, Any], registry: Any
) -> None:
    """Record the out-of-tree classes ``spec`` names on ``registry``'s axis in ``found``."""
    for i, name in enumerate(_specs(spec, registry.key)):
        try:
            cls = registry.get(name)
        except ComponentError:
            if i == 0:  # the component itself; a nested key may mean something else
                raise
            continue
        if not in_tree(cls):
            found[(registry.kind, name)] = Component(
                registry.kind, name, f"{cls.__module__}:{cls.__qualname__}",
                cls.__module__.split(".")[0])


def sources(method: Mapping[str, Any]) -> list[PackageSource]:
    """The packages outside fedcore that a method's components come from, sorted by name."""
    packages = sorted({c.package for c in components(method)})
    return [package_source(p) for p in packages]


def import_roots(method: Mapping[str, Any]) -> list[str]:
    """The folders another process on this machine (a Dask worker) needs on ``sys.path`` to
    resolve the method's components: each package's root and, for an entry point, the folder
    holding its distribution's metadata."""
    roots = {s.root for s in sources(method)}
    for c in components(method):
        ep = None if ":" in c.name else entry_points(GROUPS[c.kind]).get(c.name)
        if ep is not None and ep.dist is not None:
            roots.add(str(Path(str(ep.dist.locate_file(""))).resolve()))
    return sorted(roots)


def add_roots(roots: list[str]) -> None:
    """Append the existing folders of ``roots`` missing from ``sys.path`` (a worker's side of
    ``import_roots``) and forget cached entry point listings."""
    added = False
    for root in roots:
        if root not in sys.path and Path(root).is_dir():
            sys.path.append(root)
            added = True
    if added:
        importlib.invalidate_caches()
        from fedcore.core.compose.axes import AXES

        for axis in AXES:
            axis.registry.refresh()


def tags(method: Mapping[str, Any]) -> dict[str, str]:
    """MLflow tags naming the out-of-tree code of a run (none for fedcore's own components)."""
    comps = components(method)
    if not comps:
        return {}
    out = {"fedcore.plugins": ", ".join(f"{c.name} = {c.target}" for c in comps)[:5000]}
    for s in sources(method):
        prefix = f"fedcore.plugin.{s.package}"
        out[f"{prefix}.files_digest"] = s.files_digest
        out[f"{prefix}.path"] = s.root
        if s.distribution:
            out[f"{prefix}.distribution"] = s.distribution
            out[f"{prefix}.version"] = s.version or "unknown"
        if s.git_commit:
            out[f"{prefix}.git_commit"] = s.git_commit
            out[f"{prefix}.git_dirty"] = str(s.git_dirty).lower()
    return out
