"""EF (Stich et al. 2018): the residual is added back in full, training starts at w (alpha 0)."""

from __future__ import annotations

from fedcore.core.stages.feedback.base import register
from fedcore.core.stages.feedback.residual import ResidualFeedback


@register("ef")
class EF(ResidualFeedback):
    fixed_alpha = 0.0
