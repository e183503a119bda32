"""Callbacks chosen in the config (``callbacks: [{callback: NAME, **hparams}]``): their registry
(built-ins here, entry points of group ``fedcore.callbacks``, or ``module:Class``), the config
check and how a run builds them.

A configured callback is a ``ConfiguredCallback``: a name, validated ``HParams``, the
config keys it needs (``requirements``) and a state the checkpoint holds (``state_dict``)."""

from __future__ import annotations

from typing import Any

from fedcore.core.callbacks.base import Callback
from fedcore.core.config.component import Component
from fedcore.core.config.errors import ConfigError
from fedcore.core.config.limits import shown
from fedcore.core.config.registry import Registry

REGISTRY: Registry[ConfiguredCallback] = Registry(
    "callback", "callback", "fedcore.core.callbacks",
    "fedcore.core.callbacks.configured:ConfiguredCallback"
)
register = REGISTRY.register


class ConfiguredCallback(Callback, Component):
    """A callback a config can name: a component (``name``, ``HParams``, ``hp``,
    ``requirements``, ``state_dict``) with the callback hooks; subclasses override both."""


def resolve_callbacks(specs: Any) -> list[dict[str, Any]] | None:
    """The canonical list of ``callbacks`` (defaults filled in), None when there is none."""
    from fedcore.core.config.component_spec import resolve_one

    if specs is None or specs == []:
        return None
    if not isinstance(specs, list):
        raise ConfigError(f"callbacks: expected a list of {{callback: NAME, ...}} "
                          f"(got {shown(specs)})")
    out = []
    for i, spec in enumerate(specs):
        where = f"callbacks[{i}]"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a mapping {{callback: NAME, ...}} "
                              f"(got {shown(spec)})")
        out.append(resolve_one(spec, where, REGISTRY))
    return out


def build_callbacks(specs: list[dict[str, Any]] | None) -> list[ConfiguredCallback]:
    """The configured callbacks of a resolved config, in order."""
    return [REGISTRY.build(spec) for spec in specs or []]
