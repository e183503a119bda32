"""A trial's score: the study's declared endpoint, the mean of a metric over the run's last ``k``
evaluations (``average_last``), not its value at one final round (no Optuna here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedcore.core.callbacks.summary import FINAL

# summary metric -> the per-round metric it is the last evaluation of
ROUND_OF: dict[str, str] = {
    **FINAL,
    "final/personal_accuracy_mean": "personal/accuracy_mean",
    "final/personal_accuracy_worst10": "personal/accuracy_worst10",
    "final/personal_accuracy_std": "personal/accuracy_std",
    "final/personal_jain": "personal/jain_index",
}
DEFAULT_AVERAGE_LAST = 5


def trial_value(
    metric: str, history: Sequence[Mapping[str, float]], summary: Mapping[str, float], k: int
) -> float:
    """``metric``'s mean over the last ``k`` evaluations that measured it (all of them when
    fewer); a metric that is already a mean over the run (``auc/accuracy``) as summarised."""
    key = ROUND_OF.get(metric)
    if key is None:
        return float(summary[metric])
    values = [float(h[key]) for h in history if key in h]
    if not values:
        raise KeyError(metric)
    return float(np.mean(values[-k:]))


def objective_label(metric: str, k: int) -> str:
    """How a trial's value of ``metric`` was computed, for tables and file headers."""
    key = ROUND_OF.get(metric)
    if key is None or k == 1:
        return metric
    return f"{key} mean of last {k}"
