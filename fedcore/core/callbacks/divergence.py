"""The built-in divergence guard: a run whose numbers became non-finite fails at once."""

from __future__ import annotations

import math

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict


class DivergenceGuard(Callback):
    """Raises ``FloatingPointError`` after a round that diverged (``divergence``); it runs
    after the user's callbacks, so the diverged round is reported first."""

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        reason = divergence(record.round, record.metrics, len(record.sampled))
        if reason:
            raise FloatingPointError(reason)
        return None


def divergence(round: int, metrics: dict[str, float], sampled: int) -> str | None:
    """Why the run diverged this round, or None.

    A non-finite global test loss, or a non-finite train loss with every sampled update
    non-finite (a single client's NaN update is excluded and the run goes on); ``sampled``:
    the clients sampled this round (a Poisson-sampled round may have none, and no train loss).
    """
    test = metrics.get("test/loss", 0.0)
    if not math.isfinite(test):
        return f"diverged at round {round}: test/loss is {test}"
    train = metrics["train/loss"]
    if sampled and not math.isfinite(train) and metrics["agg/rejected_clients"] >= sampled:
        return f"diverged at round {round}: train/loss is {train} and every update is non-finite"
    return None
