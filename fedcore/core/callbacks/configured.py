"""Callbacks chosen in the config (``callbacks: [{callback: NAME, **hparams}]``): their registry
(built-ins here, entry points of group ``fedcore.callbacks``, or ``module:Class``) and how a run
builds them (the config check is the ``callbacks`` axis of ``fedcore.core.compose.axes``).

A configured callback is a ``ConfiguredCallback``: a name, validated ``HParams``, the
config keys it needs (``requirements``) and a state the checkpoint holds (``state_dict``)."""

from __future__ import annotations

from typing import Any

from fedcore.core.callbacks.base import Callback
from fedcore.core.component.base import Component
from fedcore.core.component.registry import Registry

REGISTRY: Registry[ConfiguredCallback] = Registry(
    "callback", "callback", "fedcore.core.callbacks",
    "fedcore.core.callbacks.configured:ConfiguredCallback"
)
register = REGISTRY.register


class ConfiguredCallback(Callback, Component):
    """A callback a config can name: a component (``name``, ``HParams``, ``hp``,
    ``requirements``, ``state_dict``) with the callback hooks; subclasses override both."""


def build_callbacks(specs: list[dict[str, Any]] | None) -> list[ConfiguredCallback]:
    """The configured callbacks of a resolved config, in order."""
    return [REGISTRY.build(spec) for spec in specs or []]
