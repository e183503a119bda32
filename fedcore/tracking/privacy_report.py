"""The privacy part of a sweep report: epsilon (at delta) per row, and accuracy against epsilon
(docs/how-to/privacy.md). A run without a privacy mechanism has epsilon infinity."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fedcore.stats.intervals import mean_interval
from fedcore.tracking.plots import _pyplot

if TYPE_CHECKING:
    from mlflow.entities import Run

EPSILON_METRIC = "privacy/epsilon"
DELTA_PARAM = "dp.delta"
COLUMN = "ε (at δ)"
TITLE = "Accuracy vs privacy: mean of last k over seeds, bars = 95 % interval"


def run_privacy(run: Run) -> tuple[float, float]:
    """(epsilon spent by the run's last round, its delta); (inf, nan) without a mechanism."""
    eps = run.data.metrics.get(EPSILON_METRIC)
    if eps is None:
        return math.inf, math.nan
    return float(eps), float(run.data.params.get(DELTA_PARAM, "nan"))


def private(runs: pd.DataFrame) -> bool:
    """Whether any run of the report has a finite epsilon."""
    return "epsilon" in runs and bool(np.isfinite(runs["epsilon"].astype(float)).any())


def epsilon_text(epsilons: list[float], deltas: list[float]) -> str:
    """``4 (δ=0.0063)``: the largest epsilon of a row's finished seeds and its delta; ``∞``
    without a mechanism; blank when no seed finished."""
    eps = [e for e in epsilons if not math.isnan(e)]
    if not eps:
        return ""
    worst = max(eps)
    if math.isinf(worst):
        return "∞"
    delta = max((d for d in deltas if not math.isnan(d)), default=math.nan)
    return f"{worst:.4g} (δ={delta:.2g})"


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
