"""The callback protocol: what a callback receives after each round and what it may return.

After every round the loop calls each callback's ``on_round_end`` with one ``RoundRecord``;
a callback returns None or a ``RoundVerdict`` (metrics to add to the round, per-client
columns, a request to stop). Light on purpose: no torch import.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedcore.core.records.run import Result, RoundRecord, RoundVerdict, RunView

__all__ = ["Callback", "RoundRecord", "RoundVerdict", "RunView"]


class Callback:
    """Receives the loop's reports (the built-in evaluation, summary, divergence guard and
    checkpoint, components' own callbacks, the MLflow tracker, the CLI's progress bar, the
    tuner's pruning reporter). Subclasses override the hooks they need; the others do nothing.
    The simulation refuses a callback that is not a ``Callback``."""

    def on_run_start(self, run: RunView) -> None:
        """Before the first round still to play (``run.round`` rounds are done after a
        resume); ``run`` is the run's read-only view, valid for the whole run."""

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        """After round ``record.round``: return metrics to add, or a stop, or None."""
        return None

    def on_checkpoint(self, path: Path) -> None:
        """After the checkpoint of the round just reported was written to ``path``."""

    def on_run_end(self, result: Result) -> Mapping[str, float] | None:
        """After the last round played; may return summary metrics to add to
        ``result.summary`` (callbacks after it see them)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs of this callback (a configured callback's is checkpointed)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``."""
