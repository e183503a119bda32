"""SAEF (Xu et al. 2021): training starts at the fully corrected point w - e (alpha 1)."""

from __future__ import annotations

from fedcore.core.stages.feedback.base import register
from fedcore.core.stages.feedback.residual import ResidualFeedback


@register("saef")
class SAEF(ResidualFeedback):
    fixed_alpha = 1.0
