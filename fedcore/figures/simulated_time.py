"""Test accuracy against simulated seconds, for runs with a ``system`` block or an asynchronous
rule (docs/how-to/stragglers.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedcore.figures.plots import _pyplot

TITLE = "Accuracy vs simulated time: mean over seeds per round"


def accuracy_vs_time_png(runs: pd.DataFrame, acc: dict[str, pd.Series],
                         clock: dict[str, pd.Series], path: Path) -> None:
    """One line per row: the mean over seeds of (simulated seconds, test accuracy) at each
    evaluated round its seeds share."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for row, group in runs.groupby("row", sort=False):
        curves = [pd.concat([clock[r], acc[r]], axis=1, join="inner").to_numpy()
                  for r in group["run_id"] if r in clock and r in acc]
        curves = [c for c in curves if len(c)]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        mean = sum(c[:n] for c in curves) / len(curves)
        ax.plot(mean[:, 0], mean[:, 1], marker=".", label=str(row))
    ax.set(xlabel="simulated seconds", ylabel="test accuracy", title=TITLE)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
