"""No error feedback: the delta itself is compressed; nothing is kept between rounds."""

from __future__ import annotations

from fedcore.core.stages.feedback.base import ErrorFeedback, register


@register("none")
class NoFeedback(ErrorFeedback):
    """C(delta) on the wire."""
