"""Report figures of a sweep comparison: convergence panels (one per comparison family, then the
rows in no family), and a forest plot of each family's paired differences.

Both draw with pyplot on Agg (:func:`fedcore.tracking.plots._pyplot`), save the PNG, close the
figure and return it, so that a caller (or a test) can read what was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedcore.pipeline.stats import VERDICTS, mean_interval
from fedcore.tracking.plots import _pyplot, integer_ticks

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SERVER = "server rules"
ROBUST = "robust rules"
COMPRESSED = "compressed uplinks"
OBJECTIVES = "client objectives"
PERSONAL = "personalised and control-variate"
OTHER = "other"

# method (the name of its file in configs/methods/) -> family
FAMILIES: dict[str, str] = {
    **dict.fromkeys(("fedavg", "fedavgm", "craft", "craft_model", "config", "crf_fedavg",
                     "crf_fedprox", "fedoui", "fednova", "qfedavg", "fedfv", "fedlf", "afl",
                     "fedalign_fedoui"), SERVER),
    **dict.fromkeys(("krum", "multikrum", "trimmed_mean", "median", "rfa", "geometric_median"),
                    ROBUST),
    **dict.fromkeys(("fedavg_topk", "ef_topk", "saef_topk", "sapef_topk", "cser_topk",
                     "scafcom_topk"), COMPRESSED),
    **dict.fromkeys(("fedprox", "fedquad", "tripletfl", "quadrupletfl", "supconfl", "moon"),
                    OBJECTIVES),
    **dict.fromkeys(("ditto", "ditto_craft", "scaffold", "feddyn"), PERSONAL),
}

VERDICT_COLOURS: dict[str, str] = {
    "better": "tab:green", "worse": "tab:red", "equivalent": "tab:blue", "undecided": "grey",
    "no test": "silver", "blocked": "black", "not run": "silver",
}
CONVERGENCE_TITLE = "Test accuracy per round: mean over n seeds, band = 95 % interval"
FOREST_TITLE = ("Reference − baseline per family, paired over seeds "
                "(interval at the family's Holm-adjusted level; colour = verdict)")


def family_of(method: str, compressor: str) -> str:
    """The family of a method: "compressed uplinks" whenever the uplink is compressed, else the
    method's entry in :data:`FAMILIES` ("other" for a method it does not know)."""
    if compressor != "none":
        return COMPRESSED
    return FAMILIES.get(method, OTHER)


def _alpha_text(alpha: float) -> str:
    return f"{alpha:g}"


def _mean_band(curves: Sequence[pd.Series]) -> tuple[pd.Index, np.ndarray, np.ndarray,
                                                    np.ndarray]:
    """Rounds, and per round the mean over seeds with the low/high of its 95 % t-interval."""
    frame = pd.concat(list(curves), axis=1).sort_index()
    intervals = [mean_interval(list(values)) for values in frame.to_numpy(dtype=float)]
    return (frame.index, np.array([i.mean for i in intervals]),
            np.array([i.low for i in intervals]), np.array([i.high for i in intervals]))


def _curve(ax: Axes, curves: Sequence[pd.Series], label: str, color: str,
           linestyle: str = "-") -> None:
    """One row's mean curve, with its band where at least 2 seeds report a round."""
    rounds, mean, low, high = _mean_band(curves)
    n = len(curves)
    ax.plot(rounds, mean, label=f"{label} (n={n})" if n > 1 else f"{label} (1 seed, no band)",
            color=color, linestyle=linestyle)
    if n > 1:
        ax.fill_between(rounds, low, high, color=color, alpha=0.2, linewidth=0)


def convergence_png(panels: Sequence[tuple[str, Any, str | None, list[str]]],
                    runs: pd.DataFrame, acc: dict[str, pd.Series], path: Path) -> Figure:
    """Test accuracy per round in small multiples, one panel per (title, alpha, reference,
    rows) of ``panels`` (only panels with runs are given): each row's mean over seeds with its
    95 % t-interval band, labelled with its n, and the reference dashed in black.

    ``runs``: run_id, row, alpha; ``acc[run_id]``: test accuracy indexed by round. Returns the
    (closed) figure.
    """
    plt = _pyplot()
    fig: Figure
    if not panels:
        fig = plt.figure(figsize=(6, 1.5))
        fig.text(0.5, 0.5, "no finished runs", ha="center", va="center")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return fig
    ncols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.2 * nrows), squeeze=False,
                             layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, alpha, reference, rows) in zip(axes.flat, panels, strict=False):
        at_alpha = runs[runs["alpha"] == alpha]
        for k, row in enumerate(rows):
            ids = list(at_alpha.loc[at_alpha["row"] == row, "run_id"])
            if ids:
                _curve(ax, [acc[r] for r in ids], row, color=colours[k % len(colours)])
        if reference is not None:
            ids = list(at_alpha.loc[at_alpha["row"] == reference, "run_id"])
            if ids:
                _curve(ax, [acc[r] for r in ids], f"{reference} (reference)", color="black",
                       linestyle="--")
        ax.set(xlabel="round", ylabel="test accuracy (global test set)",
               title=f"{title}, Dirichlet α = {_alpha_text(alpha)}")
        integer_ticks(ax)
        ax.grid(alpha=0.3)
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -0.02), min(high, 1.02))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(CONVERGENCE_TITLE)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def family_forest_png(diffs: pd.DataFrame, path: Path) -> Figure:
    """Forest plot of each family's comparisons: a panel per family and setting, the baselines on
    the y axis, reference − baseline on the x axis with the interval at the level the family's
    Holm correction gave it (so it excludes 0 exactly when the verdict is better or worse; an
    equivalent verdict's is its TOST interval), coloured by verdict, with dashed lines at ±
    the family's equivalence margin.

    ``diffs``: family, row, mean, low, high (NaN: no interval), verdict, reference, n and
    (optional) margin.
    """
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig: Figure
    if diffs.empty:
        fig = plt.figure(figsize=(6, 1.5))
        fig.text(0.5, 0.5, "no comparison family in this sweep", ha="center", va="center")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return fig
    families = list(dict.fromkeys(diffs["family"]))
    heights = [int((diffs["family"] == f).sum()) + 1.5 for f in families]
    fig, axes = plt.subplots(len(families), 1, figsize=(8, 0.34 * sum(heights) + 1.8),
                             squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    for ax, fam in zip(axes[:, 0], families, strict=True):
        sub = diffs[diffs["family"] == fam].reset_index(drop=True)
        for y, line in sub.iterrows():
            colour = VERDICT_COLOURS.get(str(line["verdict"]), "black")
            mean, low, high = float(line["mean"]), float(line["low"]), float(line["high"])
            if math.isfinite(low) and math.isfinite(high):
                ax.errorbar([mean], [y], xerr=[[mean - low], [high - mean]], fmt="o",
                            color=colour, ecolor=colour, capsize=3, markersize=5)
            elif math.isfinite(mean):
                ax.plot([mean], [y], "D", color=colour, markersize=5, markeredgecolor="dimgrey")
        ax.axvline(0.0, color="black", linewidth=0.8)
        margin = float(sub["margin"].iloc[0]) if "margin" in sub else math.nan
        if math.isfinite(margin) and margin > 0:
            for x in (-margin, margin):
                ax.axvline(x, color="dimgrey", linestyle="--", linewidth=0.8,
                           label=f"±{margin:g} (equivalence margin)" if x > 0 else None)
        ax.set_yticks(range(len(sub)), [f"{r} (n={n})" for r, n in zip(sub["row"], sub["n"],
                                                                        strict=True)],
                      fontsize=8)
        ax.set(ylim=(len(sub) - 0.5, -0.5), title=fam,
               xlabel=f"{sub['reference'].iloc[0]} − row (primary endpoint)")
        ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], marker="o", linestyle="", color=VERDICT_COLOURS[v], label=v)
               for v in VERDICTS]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.suptitle(FOREST_TITLE)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig
