"""What a component needs from the rest of the config, declared as data.

A rule, client objective or compressor returns its needs from ``requirements(hp)`` (a
classmethod that sees only its own hyper-parameters);
[`fedcore.core.compose.configure.build_config`][fedcore.api.build_config] checks every component's
declarations against the whole config in one place and refuses a config that breaks one with the
declaration's one-line message. Components never see the config's schema: a declaration names config
keys by their dotted path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedcore.core.config.limits import shown


@dataclass(frozen=True)
class Requirement:
    """The values of ``keys`` (dotted config keys, e.g. ``local.momentum``) must satisfy
    ``holds(*values)``; ``refusal(*values)`` is the one-line error when they do not (a warning
    only, when ``warn_only``)."""

    keys: tuple[str, ...]
    holds: Callable[..., bool]
    refusal: Callable[..., str]
    warn_only: bool = False

    def noted(self, note: str) -> Requirement:
        """The same requirement, its message followed by ``note`` (a wrapper's context)."""
        refusal = self.refusal
        return Requirement(
            self.keys, self.holds, lambda *v: f"{refusal(*v)}{note}", self.warn_only
        )


def setting(key: str, allowed: tuple[Any, ...], who: str, needs: str, why: str = "") -> Requirement:
    """``key`` must hold one of ``allowed``; refused as ``KEY: WHO NEEDS, got VALUE; WHY``."""
    tail = f"; {why}" if why else ""
    return Requirement(
        (key,), lambda value: value in allowed,
        lambda value: f"{key}: {who} {needs}, got {shown(value)}{tail}",
    )


@dataclass(frozen=True)
class SendsUpdate:
    """A rule's need: the client objective whose update reaches the server is ``algorithm``
    (the rule reads that objective's extra uplink vectors). A client that wraps another
    objective says which one sends its global update (``ClientAlgorithm.update_objective``)."""

    rule: str
    algorithm: str


Need = Requirement | SendsUpdate
