"""Whether a row was still learning at its endpoint: climbing or plateaued.

The rule (docs/explanation/statistics.md): for each seed, the change of the mean test accuracy
between the last two windows of ``k`` evaluations (the endpoint's window and the one before
it); over the row's seeds, the mean change and its seed-to-seed standard error. A row is
**climbing** when the mean change is at least ``MIN_CHANGE`` and more than ``NOISE_SE``
standard errors above zero (one seed: the first condition alone), **plateaued** otherwise, and
**too short to tell** with fewer than ``2 k`` evaluations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_CHANGE = 0.005  # half a point of accuracy between the two windows
NOISE_SE = 2.0  # standard errors of the seeds' changes the mean change must exceed
CLIMBING, PLATEAUED, SHORT = "climbing", "plateaued", "too short to tell"


@dataclass(frozen=True)
class TrainingState:
    """A row's state at its endpoint, with the mean change between the windows, its standard
    error over seeds (NaN with one seed) and the seeds and window behind it."""

    state: str
    change: float
    se: float
    n: int
    k: int

    def text(self) -> str:
        """``climbing (+0.052 ± 0.010 between the last two windows of 5 evaluations)``."""
        if self.state == SHORT:
            return f"{SHORT} (fewer than {2 * self.k} evaluations)"
        se = f" ± {self.se:.3f}" if math.isfinite(self.se) else ""
        return (f"{self.state} ({self.change:+.3f}{se} between the last two windows of "
                f"{self.k} evaluations)")


def window_change(accuracy: Sequence[float], k: int) -> float:
    """Mean of the last ``k`` evaluations minus the mean of the ``k`` before (NaN with fewer
    than ``2 k``)."""
    if k < 1 or len(accuracy) < 2 * k:
        return math.nan
    last, before = accuracy[-k:], accuracy[-2 * k:-k]
    return math.fsum(last) / k - math.fsum(before) / k


def training_state(curves: Sequence[Sequence[float]], k: int) -> TrainingState:
    """The state of a row from its seeds' test-accuracy curves (one per seed, evaluation
    order) and the endpoint's window ``k``."""
    changes = [c for c in (window_change(curve, k) for curve in curves) if math.isfinite(c)]
    n = len(changes)
    if n == 0:
        return TrainingState(SHORT, math.nan, math.nan, 0, k)
    mean = math.fsum(changes) / n
    se = (math.sqrt(math.fsum((c - mean) ** 2 for c in changes) / (n - 1) / n) if n > 1
          else math.nan)
    climbing = mean >= MIN_CHANGE and (n == 1 or mean > NOISE_SE * se)
    return TrainingState(CLIMBING if climbing else PLATEAUED, mean, se, n, k)
