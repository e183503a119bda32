"""One client or one round played outside a run, and the built-in evaluation on demand: entry
points for tests, benchmarks and notebooks that the round driver itself never calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedcore.core.callbacks.evaluation import evaluate_run
from fedcore.core.engines import sequential

if TYPE_CHECKING:
    import numpy as np

    from fedcore.core.records import ClientUpdate
    from fedcore.core.records.client_table import ClientTable
    from fedcore.core.round.simulation import Simulation


def train_client(sim: Simulation, client_id: int, round: int) -> ClientUpdate:
    """One client's update, trained on its own (the sequential engine's unit)."""
    return sequential.train_client(sim.round_context(round), client_id)


def run_round(sim: Simulation, round: int, order: list[int] | None = None) -> dict[str, float]:
    """Play one round of ``sim`` (its sampler draws the clients) and return its metrics."""
    return sim.play_round(round, order=order).metrics


def evaluate(
    sim: Simulation,
    round: int,
    sampled: np.ndarray,
    client_values: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, float], ClientTable]:
    """The built-in evaluation of ``sim``'s current global model and the per-client table
    (``fedcore.core.callbacks.evaluation.evaluate_run``)."""
    return evaluate_run(sim.view, round, sampled, client_values)
