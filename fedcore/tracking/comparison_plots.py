"""Report figures of a sweep comparison: convergence per method family, and a forest plot of the
paired differences to the reference row.

Both draw with pyplot on Agg (:func:`fedcore.tracking.plots._pyplot`), save the PNG, close the
figure and return it, so that a caller (or a test) can read what was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

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
FAMILY_ORDER = (SERVER, ROBUST, COMPRESSED, OBJECTIVES, PERSONAL, OTHER)  # rows of panels

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

MAX_ROWS_PER_PANEL = 7  # compared rows in one convergence panel (8 lines with the reference)
VERDICT_COLOURS: dict[str, str] = {
    "better": "tab:green", "worse": "tab:red", "indistinguishable": "grey", "no test": "silver",
}
CONVERGENCE_TITLE = "Test accuracy per round: mean over seeds, band = 95 % interval"
FOREST_TITLE = ("Paired difference to the reference over seeds "
                "(95 % interval, Holm-adjusted verdicts)")


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


def _panels(runs: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """(panel-row title, compared rows) per row of panels: the families present in order, a
    family with more than :data:`MAX_ROWS_PER_PANEL` rows split evenly into "<family> (i/k)"."""
    compared = runs[~runs["is_reference"].astype(bool)]
    by_family: dict[str, list[str]] = {}
    for row, group in compared.groupby("row", sort=False):
        first = group.iloc[0]
        family = family_of(str(first["method"]), str(first["compressor"]))
        by_family.setdefault(family, []).append(str(row))
    out = []
    for family in sorted(by_family, key=FAMILY_ORDER.index):
        rows = by_family[family]
        k = math.ceil(len(rows) / MAX_ROWS_PER_PANEL)
        for i, chunk in enumerate(np.array_split(np.array(rows, dtype=object), k)):
            out.append((family if k == 1 else f"{family} ({i + 1}/{k})", [str(r) for r in chunk]))
    return out


def _curve(ax: Axes, curves: Sequence[pd.Series], label: str, color: str,
           linestyle: str = "-") -> None:
    """One row's mean curve, with its band where at least 2 seeds report a round."""
    rounds, mean, low, high = _mean_band(curves)
    n = len(curves)
    ax.plot(rounds, mean, label=label if n > 1 else f"{label} (1 seed, no band)", color=color,
            linestyle=linestyle)
    if n > 1:
        ax.fill_between(rounds, low, high, color=color, alpha=0.2, linewidth=0)


def family_convergence_png(runs: pd.DataFrame, acc: dict[str, pd.Series], path: Path) -> Figure:
    """Small multiples of test accuracy per round: a row of panels per method family, a column
    per Dirichlet alpha.

    ``runs``: run_id, row (the compared label), method, compressor, alpha, seed, is_reference;
    ``acc[run_id]``: test accuracy indexed by round. Each panel draws its family's rows at its
    alpha (mean over seeds, 95 % t-interval band; no band with one seed) and that alpha's
    reference row(s) in black dashed. Returns the (closed) figure.
    """
    plt = _pyplot()
    alphas = sorted(runs["alpha"].unique())
    panels = _panels(runs)
    nrows = max(len(panels), 1)
    fig: Figure
    fig, axes = plt.subplots(nrows, len(alphas), figsize=(6.5 * len(alphas), 4.2 * nrows),
                             squeeze=False, sharey="col", layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, alpha in enumerate(alphas):
        at_alpha = runs[runs["alpha"] == alpha]
        refs = at_alpha[at_alpha["is_reference"].astype(bool)].groupby("row", sort=False)
        for i, (title, rows) in enumerate(panels or [("no compared rows", [])]):
            ax = axes[i, j]
            for k, row in enumerate(rows):  # a row keeps its colour in every column
                ids = at_alpha.loc[at_alpha["row"] == row, "run_id"]
                if len(ids):
                    _curve(ax, [acc[r] for r in ids], row, color=colours[k % len(colours)])
            for ref, group in refs:
                _curve(ax, [acc[r] for r in group["run_id"]], f"{ref} (reference)",
                       color="black", linestyle="--")
            if not any((at_alpha["row"] == row).any() for row in rows):
                ax.text(0.5, 0.5, "no runs of this family at this alpha", ha="center",
                        va="center", transform=ax.transAxes, color="grey")
            ax.set(xlabel="round", ylabel="test accuracy (global test set)",
                   title=f"{title}, Dirichlet α = {_alpha_text(alpha)}")
            integer_ticks(ax)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="lower right")
        low, high = axes[0, j].get_ylim()  # accuracy is in [0, 1]: a wide band must not
        axes[0, j].set_ylim(max(low, -0.02), min(high, 1.02))  # squash the column's curves
    fig.suptitle(CONVERGENCE_TITLE)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def forest_png(diffs: pd.DataFrame, path: Path) -> Figure:
    """Forest plot of the paired differences to the reference: a column of panels per metric, a
    row per alpha, the compared rows on the y axis.

    ``diffs``: row, alpha, metric, label (the x axis' meaning), mean, low, high (NaN without an
    interval: a point only), verdict (one of :data:`fedcore.pipeline.stats.VERDICTS`), reference.
    Returns the (closed) figure.
    """
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig: Figure
    if diffs.empty:  # one row per setting: nothing to compare with the reference
        fig = plt.figure(figsize=(6, 1.5))
        fig.text(0.5, 0.5, "no row to compare with the reference", ha="center", va="center")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return fig
    metrics = list(dict.fromkeys(diffs["metric"]))
    alphas = sorted(diffs["alpha"].unique())
    rows_of = {a: list(dict.fromkeys(diffs.loc[diffs["alpha"] == a, "row"])) for a in alphas}
    heights = [len(rows_of[a]) + 1.5 for a in alphas]  # each alpha lists only its own rows
    fig, axes = plt.subplots(len(alphas), len(metrics),
                             figsize=(5.5 * len(metrics) + 1.5, 0.32 * sum(heights) + 1.6),
                             squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    for i, alpha in enumerate(alphas):
        rows = rows_of[alpha]
        position = {row: y for y, row in enumerate(rows)}
        for j, metric in enumerate(metrics):
            ax = axes[i, j]
            sub = diffs[(diffs["alpha"] == alpha) & (diffs["metric"] == metric)]
            for verdict, group in sub.groupby("verdict", sort=False):
                colour = VERDICT_COLOURS.get(str(verdict), "black")
                y = group["row"].map(position).to_numpy(dtype=float)
                mean = group["mean"].to_numpy(dtype=float)
                low = group["low"].to_numpy(dtype=float)
                high = group["high"].to_numpy(dtype=float)
                ok = np.isfinite(low) & np.isfinite(high)
                if ok.any():
                    ax.errorbar(mean[ok], y[ok],
                                xerr=np.vstack([mean[ok] - low[ok], high[ok] - mean[ok]]),
                                fmt="o", color=colour, ecolor=colour, capsize=3, markersize=5)
                if (~ok).any():
                    ax.plot(mean[~ok], y[~ok], "D", color=colour, markersize=5,
                            markeredgecolor="dimgrey")
            ax.axvline(0.0, color="black", linewidth=0.8)
            labels = ", ".join(dict.fromkeys(diffs.loc[diffs["metric"] == metric, "label"]))
            refs = ", ".join(dict.fromkeys(sub["reference"])) or "the reference"
            ax.set(xlabel=f"{labels} (vs {refs})", title=f"{metric}, Dirichlet α = "
                   f"{_alpha_text(alpha)}", ylim=(len(rows) - 0.5, -0.5))
            ax.set_yticks(range(len(rows)), rows, fontsize=8)
            ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], marker="o", linestyle="", color=VERDICT_COLOURS[v], label=v)
               for v in VERDICTS]
    handles.append(Line2D([], [], marker="D", linestyle="", color=VERDICT_COLOURS["no test"],
                          markeredgecolor="dimgrey", label="one seed: no interval"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.suptitle(FOREST_TITLE)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig
