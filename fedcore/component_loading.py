"""Loading a component by entry point or import path: the part of plugin support the
registries need (a leaf: it imports no component). Which packages a method's components come
from is :mod:`fedcore.plugins`."""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
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
    :class:`ComponentError` naming the module and the cause."""
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
