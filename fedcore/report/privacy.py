"""The privacy part of a sweep report: epsilon (at delta) per row (docs/how-to/privacy.md). A run
without a privacy mechanism has epsilon infinity."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

COLUMN = "ε (at δ)"


def private(runs: pd.DataFrame) -> bool:
    """Whether any run of the report has a finite epsilon."""
    return "epsilon" in runs and bool(np.isfinite(runs["epsilon"].astype(float)).any())


def epsilon_text(epsilons: list[float], deltas: list[float]) -> str:
    """``4 (δ=0.0063)``: the largest epsilon of a row's finished seeds and its delta; ``∞``
    without a mechanism; blank when no seed finished."""
    eps = [e for e in epsilons if not math.isnan(e)]
    if not eps:
        return ""
    worst = max(eps)
    if math.isinf(worst):
        return "∞"
    delta = max((d for d in deltas if not math.isnan(d)), default=math.nan)
    return f"{worst:.4g} (δ={delta:.2g})"
