"""Loading a component by entry point or import path: the part of plugin support the
registries need (a leaf: it imports no component). Which packages a method's components come
from is ``fedcore.core.compose.plugins``."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import sys
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
    "callback": "fedcore.callbacks",
}


DIGEST_LENGTH = 12  # hex characters of a package's files digest


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
    if isinstance(exc, SystemExit):
        return f"SystemExit: it called sys.exit({exc.code!r}) while imported"
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
    ``ComponentError`` naming the module and the cause."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ComponentError(f"{path!r}: an import path is module:Class, e.g. mypkg.rules:ClipAvg")
    try:
        obj: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (any failure of the user's module,
        # a sys.exit() at import included, is reported; it ended fedcore silently)
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
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (sys.exit() at import too)
        raise ComponentError(f"cannot load {what}: module {ep.module!r} ({_cause(exc)})") from None
    return _check(obj, what, kind, base)


def _source_files(package: str) -> tuple[Path, list[Path]]:
    """The sys.path entry holding ``package`` and its ``.py`` files."""
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
    """sha256 (first ``DIGEST_LENGTH`` hex characters) of ``files`` under ``root``."""
    h = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        data = path.read_bytes()
        name = path.relative_to(root).as_posix().encode()
        h.update(b"%d:%s:%d:" % (len(name), name, len(data)))
        h.update(data)
    return h.hexdigest()[:DIGEST_LENGTH]


@functools.cache
def package_files(package: str) -> tuple[Path, list[Path], str]:
    """``(root, files, files digest)`` of a package outside fedcore, read once per process:
    ``pin_source`` reads it as the package's component is imported, so the digest is that
    of the code this process loaded, however late a run asks for it."""
    root, files = _source_files(package)
    return root, files, files_digest(root, files)


def pin_source(cls: type) -> None:
    """Digest the files of an out-of-tree class's package now (``package_files``); a
    package without source files is left for the run's code digest to report."""
    if in_tree(cls):
        return
    try:
        package_files(cls.__module__.split(".")[0])
    except ComponentError:
        pass
