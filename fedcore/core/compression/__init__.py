"""Uplink compressors: the operator C. ``build({"compressor": NAME, **hparams})`` gives it; the
error-feedback variant of the same flat ``method.compression`` mapping is a stage
(``fedcore.core.stages.feedback.build_feedback``)."""

from __future__ import annotations

from typing import Any

from fedcore.core.compression.base import REGISTRY, CompressionHParams, Compressor


def build(spec: dict[str, Any]) -> Compressor:
    """The compressor of a flat ``method.compression`` mapping (its error-feedback keys aside:
    those the compressor's ``HParams`` does not have)."""
    cls = REGISTRY.get(spec[REGISTRY.key])
    own = {k: v for k, v in spec.items() if k == REGISTRY.key or k in cls.HParams.model_fields}
    return REGISTRY.build(own)


def names() -> list[str]:
    return REGISTRY.names()


__all__ = ["CompressionHParams", "Compressor", "build", "names"]
