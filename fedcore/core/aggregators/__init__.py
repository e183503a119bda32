"""Server aggregation rules. ``build({"rule": NAME, **hparams})`` returns an Aggregator."""

from __future__ import annotations

from typing import Any

from fedcore.core.aggregators.base import (
    REGISTRY,
    Aggregator,
    weighted_mean,
)


def build(spec: dict[str, Any]) -> Aggregator:
    """Build the aggregator named by ``spec["rule"]`` with its validated hyper-parameters."""
    return REGISTRY.build(spec)


def names() -> list[str]:
    return REGISTRY.names()


__all__ = ["Aggregator", "build", "names", "weighted_mean"]
