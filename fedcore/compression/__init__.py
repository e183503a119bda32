"""Uplink compressors and error feedback. ``build({"compressor": NAME, **hparams})`` gives the
operator; :func:`build_feedback` the error-feedback variant of the same flat mapping."""

from __future__ import annotations

from typing import Any

from fedcore.compression.base import REGISTRY, CompressionHParams, Compressor
from fedcore.compression.feedback.base import REGISTRY as FEEDBACK
from fedcore.compression.feedback.base import ErrorFeedback
from fedcore.compression.spec import resolve_compression, split


def build(spec: dict[str, Any]) -> Compressor:
    """The compressor of a flat ``method.compression`` mapping (its error-feedback keys aside)."""
    return REGISTRY.build(split(spec)[0])


def build_feedback(spec: dict[str, Any]) -> ErrorFeedback:
    """The error-feedback variant of a flat ``method.compression`` mapping (``none`` unnamed)."""
    return FEEDBACK.build(split(spec)[1])


def names() -> list[str]:
    return REGISTRY.names()


__all__ = [
    "CompressionHParams", "Compressor", "ErrorFeedback", "build", "build_feedback", "names",
    "resolve_compression",
]
