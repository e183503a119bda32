"""Uplink compressors with optional error feedback. ``build({"compressor": NAME, **hparams})``."""

from __future__ import annotations

from typing import Any

from fedcore.compression.base import REGISTRY, CompressionHParams, Compressor


def build(spec: dict[str, Any]) -> Compressor:
    return REGISTRY.build(spec)


def names() -> list[str]:
    return REGISTRY.names()


__all__ = ["CompressionHParams", "Compressor", "build", "names"]
