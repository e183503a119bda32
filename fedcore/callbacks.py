"""The round loop's callback interface: every report a callback can receive, each a no-op here.

Light on purpose (no torch import) so that the CLI's progress bar can subclass it at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedcore.simulation import ClientTable, Result, Simulation


class Callback:
    """Receives the loop's reports (the MLflow tracker, the CLI's progress bar and the tuner's
    pruning reporter are callbacks). Subclasses override the hooks they need; the others do
    nothing. The simulation refuses a callback that is not a ``Callback``."""

    def on_run_start(self, sim: Simulation) -> None:
        """Before the first round still to play (``sim.round`` rounds are done after a resume)."""

    def on_round_end(
        self, round: int, metrics: dict[str, float], clients: ClientTable | None
    ) -> None:
        """After round ``round``; ``clients`` is its per-client table on evaluation rounds."""

    def on_checkpoint(self, path: Path) -> None:
        """After the checkpoint of the round just reported was written to ``path``."""

    def on_run_end(self, result: Result) -> None:
        """After the last round, with the summary computed."""
