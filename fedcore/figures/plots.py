"""The run's figures: convergence curves and the per-client accuracy distribution."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _pyplot() -> ModuleType:
    """pyplot on the Agg backend (reports and studies; a run's figures use ``_figure``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(figsize: tuple[float, float]) -> Figure:
    """A standalone figure (no pyplot: cheaper to import, no global state shared between the
    threads that end runs in the background); saved with Agg like pyplot's."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def integer_ticks(ax: Axes) -> None:
    """Whole-number ticks on the x axis (rounds are integers: no 2.5, 7.5)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


_MARGINS = {"left": 0.07, "right": 0.98, "bottom": 0.13, "top": 0.9, "wspace": 0.22}


def curves_png(history: list[dict[str, float]], path: Path) -> Figure:
    evals = [h for h in history if "test/accuracy" in h]
    fig = _figure((10, 4))
    ax_acc, ax_loss = fig.subplots(1, 2)
    ax_acc.plot([h["round"] for h in evals], [h["test/accuracy"] for h in evals], label="test")
    ax_acc.plot(
        [h["round"] for h in evals],
        [h["clients/accuracy_mean"] for h in evals],
        label="clients mean",
    )
    ax_acc.plot(
        [h["round"] for h in evals],
        [h["clients/accuracy_worst10"] for h in evals],
        label="clients worst 10%",
    )
    ax_acc.set(xlabel="round", ylabel="accuracy", title="Accuracy")
    ax_acc.legend()
    ax_loss.plot([h["round"] for h in history], [h["train/loss"] for h in history], label="train")
    ax_loss.plot([h["round"] for h in evals], [h["test/loss"] for h in evals], label="test")
    ax_loss.set(xlabel="round", ylabel="loss", title="Loss")
    ax_loss.legend()
    integer_ticks(ax_acc)
    integer_ticks(ax_loss)
    fig.subplots_adjust(**_MARGINS)  # fixed margins: tight_layout costs a draw per figure
    fig.savefig(path, dpi=100)
    return fig


def fairness_png(accuracy: np.ndarray, round: int, path: Path) -> Figure:
    fig = _figure((10, 4))
    ax_hist, ax_sorted = fig.subplots(1, 2)
    # stairs: one artist per panel (a bar per client costs ~5 ms each in matplotlib)
    counts, edges = np.histogram(accuracy, bins=min(20, max(len(accuracy), 1)), range=(0, 1))
    ax_hist.stairs(counts, edges, fill=True)
    ax_hist.set(
        xlabel="local test accuracy", ylabel="clients", title=f"Per-client accuracy, round {round}"
    )
    ax_sorted.stairs(np.sort(accuracy), np.arange(len(accuracy) + 1) - 0.5, fill=True)
    ax_sorted.set(xlabel="client (sorted)", ylabel="accuracy", ylim=(0, 1), title="Sorted")
    fig.subplots_adjust(**_MARGINS)
    fig.savefig(path, dpi=100)
    return fig
