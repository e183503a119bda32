"""Accuracy against the privacy budget spent: one line per method over epsilon, with 95 %
intervals (docs/how-to/privacy.md)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedcore.figures.plots import _pyplot
from fedcore.stats.intervals import mean_interval

TITLE = "Accuracy vs privacy: mean of last k over seeds, bars = 95 % interval"


def accuracy_vs_epsilon_png(runs: pd.DataFrame, path: Path, column: str = "accuracy_last_k"
                            ) -> None:
    """One line per method: the mean ``column`` over seeds at each epsilon (infinity drawn at
    the right, labelled ∞), with its 95 % interval."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finite = runs["epsilon"][np.isfinite(runs["epsilon"])]
    right = float(finite.max()) * 2 if len(finite) else 1.0  # where infinity is drawn
    for method, group in runs.groupby("method", sort=False):
        xs, ys, lo, hi = [], [], [], []
        for eps, seeds in group.groupby("epsilon", sort=True):
            interval = mean_interval(list(seeds[column]))
            xs.append(right if math.isinf(float(eps)) else float(eps))
            ys.append(interval.mean)
            lo.append(interval.mean - interval.low if not math.isnan(interval.low) else 0.0)
            hi.append(interval.high - interval.mean if not math.isnan(interval.high) else 0.0)
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=str(method))
    ticks = sorted({*finite.round(3).tolist(), right})
    ax.set(xscale="log", xlabel="epsilon (∞: no privacy)", ylabel=column, title=TITLE)
    ax.set_xticks(ticks, [("∞" if t == right else f"{t:g}") for t in ticks])
    ax.minorticks_off()
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
