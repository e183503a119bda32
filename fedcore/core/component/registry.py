"""Name -> (class, pydantic config) registries, one per component kind (the axes of
``fedcore.core.compose.axes``), and the base of every hyper-parameter model."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pydantic import ConfigDict

from fedcore.core.config.numbers import StrictNumbers

T = TypeVar("T")


class HParams(StrictNumbers):
    """Base of every hyper-parameter model: unknown keys are errors, inf and nan are refused,
    and a number is not true/false."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Registry(Generic[T]):
    """Maps a name to a class whose ``HParams`` attribute validates its hyper-parameters.

    Names are fedcore's own (modules of ``package``), entry points of the group
    ``fedcore.core.component.loading.GROUPS[kind]`` (loaded on first use), or import paths
    ``module:Class``; classes from outside fedcore must subclass ``base`` (``module:Class``).
    """

    def __init__(self, kind: str, key: str, package: str, base: str) -> None:
        self.kind, self.key, self.package, self.base = kind, key, package, base
        self._entries: dict[str, type[T]] = {}
        self._external: dict[str, type[T]] = {}  # entry points and import paths resolved so far
        self._entry_points: dict[str, Any] | None = None
        self._loaded = False

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def deco(cls: type[T]) -> type[T]:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            cls.name = name  # type: ignore[attr-defined]
            self._entries[name] = cls
            return cls

        return deco

    def _load(self) -> None:
        if not self._loaded:
            pkg = importlib.import_module(self.package)  # a module: entries registered in it
            for mod in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
                if not mod.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{mod.name}")
            self._loaded = True

    def _plugins(self) -> dict[str, Any]:
        """This kind's entry points by name (read once; `refresh` reads them again)."""
        if self._entry_points is None:
            from fedcore.core.component.loading import GROUPS, entry_points

            group = GROUPS.get(self.kind)  # a kind without a group has no entry points
            self._entry_points = entry_points(group) if group is not None else {}
        return self._entry_points

    def refresh(self) -> None:
        """Forget the entry point listing (after ``sys.path`` changed)."""
        self._entry_points = None

    def names(self) -> list[str]:
        """Built-in names and entry point names (entry points are not loaded)."""
        self._load()
        return sorted(set(self._entries) | set(self._plugins()))

    def classes(self) -> dict[str, type[T]]:
        """Built-in classes and the out-of-tree ones resolved so far, by name."""
        self._load()
        return {**self._external, **self._entries}

    def get(self, name: str) -> type[T]:
        """The class of ``name``: built-in, entry point, or import path ``module:Class``.

        Raises `fedcore.core.component.loading.ComponentError` (a KeyError) with a one-line
        reason.
        """
        from fedcore.core.component.loading import (
            ComponentError,
            load_entry_point,
            load_import_path,
            pin_source,
        )
        from fedcore.core.config.limits import shown

        self._load()
        if name in self._entries:
            return self._entries[name]
        if name in self._external:
            return self._external[name]
        module, _, attr = self.base.partition(":")
        base = getattr(importlib.import_module(module), attr)
        if ":" in name:
            cls = load_import_path(name, self.kind, base)
        elif name in self._plugins():
            cls = load_entry_point(self._plugins()[name], self.kind, base)
        else:
            raise ComponentError(
                f"unknown {shown(name)}; allowed: {', '.join(self.names())}, "
                "or an import path module:Class"
            )
        if "name" not in vars(cls):
            cls.name = name  # type: ignore[attr-defined]
        pin_source(cls)  # its files digested as imported
        self._external[name] = cls
        return cls

    def hparams(self, spec: dict[str, Any]) -> HParams:
        """Validate ``spec`` ({key: name, **hparams}) against the named entry's HParams."""
        spec = dict(spec)
        name = spec.pop(self.key)
        model: type[HParams] = self.get(name).HParams  # type: ignore[attr-defined]
        return model(**spec)

    def build(self, spec: dict[str, Any]) -> T:
        spec = dict(spec)
        name = spec[self.key]
        hp = self.hparams(spec)
        return self.get(name)(hp)  # type: ignore[call-arg]
