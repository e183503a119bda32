"""The callback protocol: what a callback receives after each round and what it may return.

After every round the loop calls each callback's ``on_round_end`` with one :class:`RoundRecord`;
a callback returns None or a :class:`RoundVerdict` (metrics to add to the round, per-client
columns, a request to stop). Light on purpose: no torch import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from fedcore.simulation import ClientTable, Result, Simulation


@dataclass
class RoundRecord:
    """One played round as the callbacks see it, in the order they run.

    ``metrics`` holds the round's metrics so far: the loop merges each callback's returned
    metrics into it, so a callback sees those of the callbacks before it. ``clients`` is the
    round's per-client table once a callback produced one (evaluation rounds). ``sim`` is the
    simulation, for reading only. ``stop`` is the reason an earlier callback asked to stop
    (None: none did); a callback after it (the checkpoint) may act on it. ``converged`` is
    the reason an earlier callback declared the run done (None: none did).
    """

    round: int
    metrics: dict[str, float]
    sim: Simulation
    sampled: np.ndarray  # the clients sampled this round (sorted ids)
    client_values: dict[str, np.ndarray] = field(default_factory=dict)  # the rule's, per client
    clients: ClientTable | None = None
    stop: str | None = None
    converged: str | None = None

    @property
    def last(self) -> bool:
        """Whether this is the run's last round."""
        return self.round == self.sim.cfg.rounds


@dataclass(frozen=True)
class RoundVerdict:
    """What a callback returns from ``on_round_end`` (None means an empty verdict).

    Two kinds of stop: ``stop`` (True or a reason) pauses the run after this round: it is
    recorded and checkpointed, ends KILLED and the same command resumes it; ``finish`` (True or
    a reason) declares it converged: it ends FINISHED after this round with the reason recorded
    (``Result.converged``), and nothing resumes it. ``metrics``: added to the round's metrics
    (history, MLflow); ``clients``: the round's per-client table (the evaluation's);
    ``columns``: extra per-client columns for that table.
    """

    stop: bool | str = False
    finish: bool | str = False
    metrics: Mapping[str, float] = field(default_factory=dict)
    clients: ClientTable | None = None
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)


class Callback:
    """Receives the loop's reports (the built-in evaluation, summary, divergence guard and
    checkpoint, components' own callbacks, the MLflow tracker, the CLI's progress bar, the
    tuner's pruning reporter). Subclasses override the hooks they need; the others do nothing.
    The simulation refuses a callback that is not a ``Callback``."""

    def on_run_start(self, sim: Simulation) -> None:
        """Before the first round still to play (``sim.round`` rounds are done after a resume)."""

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
        """Restore :meth:`state_dict`."""
