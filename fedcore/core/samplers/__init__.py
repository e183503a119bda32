"""Client samplers: ``method.sampler: {sampler: NAME, **hparams}`` (default ``uniform``)."""

from __future__ import annotations

from typing import Any

from fedcore.core.samplers.base import DEFAULT, REGISTRY, Population, Sampler


def build(spec: dict[str, Any] | None) -> Sampler:
    """The sampler of ``spec`` (None: the default, uniform)."""
    return REGISTRY.build(spec or {"sampler": DEFAULT})


__all__ = ["DEFAULT", "REGISTRY", "Population", "Sampler", "build", "resolve_sampler"]


def resolve_sampler(
    spec: Any, num_clients: int, per_round: int
) -> dict[str, Any] | None:
    """The canonical ``method.sampler`` (defaults filled in); None for the default sampler, so
    that configs without one keep their hash."""
    from fedcore.core.component.spec import resolve_one
    from fedcore.core.config.errors import ConfigError
    from fedcore.core.config.limits import shown

    if spec is None:
        return None
    if isinstance(spec, str):
        spec = {"sampler": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"method.sampler: expected a mapping {{sampler: NAME, ...}} "
                          f"(got {shown(spec)})")
    out = resolve_one(spec, "method.sampler", REGISTRY)
    reason = REGISTRY.build(out).check(num_clients, per_round)
    if reason:
        raise ConfigError(reason)
    return None if out == {"sampler": DEFAULT} else out
