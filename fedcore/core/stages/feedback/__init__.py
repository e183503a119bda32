"""Error feedback around an uplink compressor: ``none``, ``ef``, ``saef``, ``sapef``, ``cser``
(docs/methods/compression.md)."""

from __future__ import annotations

from typing import Any

from fedcore.core.stages.feedback.base import REGISTRY, ErrorFeedback
from fedcore.core.stages.feedback.residual import ALPHA, RESIDUAL, alpha_star


def build(spec: dict[str, Any]) -> ErrorFeedback:
    """The variant of ``{error_feedback: NAME, **its hparams}`` (``none`` when unnamed)."""
    return REGISTRY.build({"error_feedback": "none", **spec})


def build_feedback(spec: dict[str, Any]) -> ErrorFeedback:
    """The error-feedback variant of a flat ``method.compression`` mapping (``none`` unnamed)."""
    from fedcore.core.stages.compression_spec import split

    return REGISTRY.build(split(spec)[1])


__all__ = ["ALPHA", "RESIDUAL", "ErrorFeedback", "alpha_star", "build", "build_feedback"]
