"""The across-settings figures: a performance profile per metric and the critical-difference
diagram of the average ranks (``fedcore.report.across_settings`` writes the section around them).

The figures draw with pyplot on Agg, save the PNG, close the figure and return it, so that a caller
(or a test) can read what was drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from fedcore.figures.comparison_plots import REFERENCE_ZORDER, SMALL, fitted
from fedcore.figures.plots import _pyplot
from fedcore.stats.aggregate import cliques

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def profile_png(
    profiles: Mapping[str, pd.DataFrame], label: str, reference: str, path: Path
) -> Figure:
    """One curve per row (tau against the fraction of its runs above tau, with its band cut
    to [0, 1]); the reference dashed black, drawn last and on top (visible over a curve equal
    to it) and first in the legend."""
    plt = _pyplot()
    fig: Figure
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    order = sorted(enumerate(profiles.items()), key=lambda item: item[1][0] == reference)
    for i, (row, prof) in order:
        ref = row == reference
        colour = "black" if ref else plt.get_cmap("tab10")(i % 10)
        ax.plot(prof["tau"], prof["fraction"], color=colour, lw=2.0 if ref else 1.4,
                linestyle="--" if ref else "-", zorder=REFERENCE_ZORDER if ref else 2,
                label=f"{row} (reference)" if ref else row)
        ax.fill_between(prof["tau"], prof["low"].clip(0, 1), prof["high"].clip(0, 1),
                        color=colour, alpha=0.15, lw=0, zorder=REFERENCE_ZORDER - 1 if ref else 1)
    ax.set_xlabel(f"{label} threshold tau")
    ax.set_ylabel("fraction of runs above tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    first = sorted(range(len(labels)), key=lambda j: not labels[j].endswith("(reference)"))
    ax.legend([handles[j] for j in first], [labels[j] for j in first], fontsize=SMALL,
              loc="lower left")
    ax.set_title(fitted(f"Performance profile over all settings: {label}", 6.2))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def cd_diagram_png(ranks: pd.Series, cd: float, label: str, path: Path) -> Figure:
    """Demšar's critical-difference diagram: the rows on an axis of average rank (1 = best, on
    the left), a bar of length ``cd``, and thick lines joining rows whose ranks differ by less
    than ``cd`` (``fedcore.stats.aggregate.cliques``)."""
    plt = _pyplot()
    k = len(ranks)
    groups = cliques(ranks, cd)
    height = 1.6 + 0.28 * (k + len(groups))
    fig: Figure
    fig, ax = plt.subplots(figsize=(7.0, height))
    lo, hi = 1.0, float(max(k, 2))
    ax.hlines(0, lo, hi, color="black", lw=1)
    for t in range(1, int(hi) + 1):
        ax.vlines(t, 0, 0.08, color="black", lw=1)
        ax.text(t, 0.12, str(t), ha="center", va="bottom", fontsize="small")
    ax.hlines(0.45, lo, lo + cd, color="black", lw=1.5)
    ax.text(lo + cd / 2, 0.5, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize="small")
    half = (k + 1) // 2
    for i, (row, r) in enumerate(ranks.items()):
        left = i < half
        y = -0.35 - 0.28 * (i if left else k - 1 - i)
        x_text = lo - 0.15 if left else hi + 0.15
        ax.plot([r, r, x_text], [0, y, y], color="black", lw=0.8)
        ax.text(x_text - 0.05 if left else x_text + 0.05, y, f"{row} ({r:.2f})",
                ha="right" if left else "left", va="center", fontsize="small")
    for j, group in enumerate(groups):
        y = -0.2 - 0.1 * j
        ax.hlines(y, float(ranks[group[0]]) - 0.03, float(ranks[group[-1]]) + 0.03,
                  color="tab:red", lw=3)
    ax.set_xlim(lo - 2.2, hi + 2.2)
    ax.set_ylim(-0.5 - 0.28 * max(half, 1), 0.8)
    ax.axis("off")
    ax.set_title(f"Average rank over settings: {label}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig
