"""Client algorithms (local objectives). ``build({"algorithm": NAME, **hparams})``."""

from __future__ import annotations

from typing import Any

from fedcore.core.clients.base import REGISTRY, ClientAlgorithm


def build(spec: dict[str, Any]) -> ClientAlgorithm:
    return REGISTRY.build(spec)


def names() -> list[str]:
    return REGISTRY.names()


__all__ = ["ClientAlgorithm", "REGISTRY", "build", "names"]
