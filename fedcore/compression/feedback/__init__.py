"""Error feedback around an uplink compressor: ``none``, ``ef``, ``saef``, ``sapef``, ``cser``
(docs/methods/compression.md)."""

from __future__ import annotations

from typing import Any

from fedcore.compression.feedback.base import REGISTRY, ErrorFeedback
from fedcore.compression.feedback.residual import ALPHA, RESIDUAL, alpha_star


def build(spec: dict[str, Any]) -> ErrorFeedback:
    """The variant of ``{error_feedback: NAME, **its hparams}`` (``none`` when unnamed)."""
    return REGISTRY.build({"error_feedback": "none", **spec})


__all__ = ["ALPHA", "RESIDUAL", "ErrorFeedback", "alpha_star", "build"]
