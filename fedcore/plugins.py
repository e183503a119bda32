"""Components from the user's own package: entry points, import paths, and where they come from.

A config names a rule, client objective or compressor by a built-in name, by the name of an
entry point of the groups in :data:`GROUPS` (a distribution's metadata, discovered lazily), or by
an import path ``module:Class``. Out-of-tree classes are checked to subclass fedcore's base
class. :func:`sources` tells which packages outside fedcore a method's components come from:
their files' digest (part of the run's code digest), distribution, version and git commit.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# registry kind -> entry point group (docs/how-to/plugins.md)
GROUPS = {
    "aggregator rule": "fedcore.rules",
    "client algorithm": "fedcore.clients",
    "compressor": "fedcore.compressors",
    "error feedback": "fedcore.error_feedback",
    "stage": "fedcore.stages",
    "sampler": "fedcore.samplers",
}
DIGEST_LENGTH = 12


class ComponentError(KeyError):
    """A component name that does not resolve; ``str()`` is the one-line reason."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def in_tree(cls: type) -> bool:
    """Whether ``cls`` is defined inside the fedcore package (covered by fedcore's digest)."""
    return cls.__module__ == "fedcore" or cls.__module__.startswith("fedcore.")


def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The entry points of ``group`` on ``sys.path`` by name (the first one of a name wins)."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, ep)
    return found


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _check(obj: Any, what: str, kind: str, base: type) -> type:
    if not isinstance(obj, type) or not issubclass(obj, base):
        raise ComponentError(
            f"{what} is not a valid {kind}: it must be a class subclassing "
            f"{base.__module__}.{base.__qualname__}"
        )
    return obj


def import_object(path: str) -> Any:
    """The object at ``module:attr`` (``attr`` may be dotted), or a one-line
    :class:`ComponentError` naming the module and the cause."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ComponentError(f"{path!r}: an import path is module:Class, e.g. mypkg.rules:ClipAvg")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001  (any failure of the user's module is reported)
        hint = " (is its package installed or on PYTHONPATH?)" if isinstance(
            exc, ModuleNotFoundError) else ""
        raise ComponentError(
            f"cannot import module {module_name!r} of {path!r} ({_cause(exc)}){hint}"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ComponentError(f"module {module_name!r} has no attribute {attr!r} ({path!r})")
        obj = getattr(obj, part)
    return obj


def load_import_path(path: str, kind: str, base: type) -> type:
    """The class at ``module:Class`` (a dotted attribute path after the colon is allowed)."""
    return _check(import_object(path), repr(path), kind, base)


def load_entry_point(ep: metadata.EntryPoint, kind: str, base: type) -> type:
    """The class an entry point names, with the module and cause when it does not load."""
    dist = f" of distribution {ep.dist.name}" if ep.dist is not None else ""
    what = f"entry point {ep.name!r} ({ep.value}{dist}, group {ep.group})"
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001
        raise ComponentError(f"cannot load {what}: module {ep.module!r} ({_cause(exc)})") from None
    return _check(obj, what, kind, base)


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


def _package_files(package: str) -> tuple[Path, list[Path]]:
    try:
        spec = importlib.util.find_spec(package)
    except ValueError:  # a module without a spec, e.g. __main__ of a script
        spec = None
    if spec is None:
        origin = getattr(sys.modules.get(package), "__file__", None)
        if origin is None:
            raise ComponentError(f"package {package!r} has no source files to record")
        return Path(origin).resolve().parent, [Path(origin).resolve()]
    if spec.submodule_search_locations:
        folders = [Path(p).resolve() for p in spec.submodule_search_locations]
        files = [p for folder in folders for p in folder.rglob("*.py")
                 if "__pycache__" not in p.parts]
        return folders[0].parent, sorted(set(files))
    if spec.origin is None or not Path(spec.origin).is_file():
        raise ComponentError(f"module {package!r} has no source file")
    origin = Path(spec.origin).resolve()
    return origin.parent, [origin]


def files_digest(root: Path, files: list[Path]) -> str:
    """sha256 (first :data:`DIGEST_LENGTH` hex characters) of ``files`` under ``root``."""
    h = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        data = path.read_bytes()
        name = path.relative_to(root).as_posix().encode()
        h.update(b"%d:%s:%d:" % (len(name), name, len(data)))
        h.update(data)
    return h.hexdigest()[:DIGEST_LENGTH]


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
    root, files = _package_files(package)
    folder = files[0].parent if files else root
    commit = _git(folder, "rev-parse", "HEAD")
    dirty = None
    if commit:
        status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".")
        dirty = None if status is None else bool(status)
    dist, version = _distribution(package, root)
    return PackageSource(package, str(root), files_digest(root, files), dist, version, commit,
                         dirty)


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
    """The out-of-tree components of a method mapping (``client``, ``aggregator``,
    ``compression``, ``sampler`` and ``stages`` specs), in config order."""
    found: dict[tuple[str, str], Component] = {}
    for field, registry in _axes():
        specs = method.get(field)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, Mapping):
                _add_components(found, spec, registry)
    return list(found.values())


def _axes() -> list[tuple[str, Any]]:
    """(method key, registry) of every component axis a method names."""
    from fedcore.aggregators.base import REGISTRY as AGG
    from fedcore.clients.base import REGISTRY as CLIENTS
    from fedcore.compression.base import REGISTRY as COMP
    from fedcore.compression.feedback.base import REGISTRY as FEEDBACK
    from fedcore.samplers.base import REGISTRY as SAMPLERS
    from fedcore.stages.base import REGISTRY as STAGES

    return [("client", CLIENTS), ("aggregator", AGG), ("compression", COMP),
            ("compression", FEEDBACK), ("sampler", SAMPLERS), ("stages", STAGES)]


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
    :func:`import_roots`) and forget cached entry point listings."""
    added = False
    for root in roots:
        if root not in sys.path and Path(root).is_dir():
            sys.path.append(root)
            added = True
    if added:
        importlib.invalidate_caches()
        for _, registry in _axes():
            registry.refresh()


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
