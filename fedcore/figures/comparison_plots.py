"""Report figures of a sweep comparison: convergence panels (one per comparison family, then the
rows in no family), a forest plot of each family's paired differences, every client's final
accuracy per row, and accuracy against uplink GB.

Each draws with pyplot on Agg (`fedcore.figures.plots._pyplot`), saves the PNG, closes the
figure and returns it, so that a caller (or a test) can read what was drawn. Readable as saved:
titles wrapped to the figure, text at least 8 pt, the reference drawn on top of any curve equal
to it, bands cut to the metric's range.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedcore.figures.plots import _pyplot, integer_ticks
from fedcore.specs.families import Family
from fedcore.stats.intervals import mean_interval
from fedcore.stats.verdicts import VERDICTS

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
                     "fedalign_fedoui", "fedbuff"), SERVER),
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
FOREST_TITLE = ("Reference − baseline per family, paired over seeds\n"
                "(interval at the family's Holm-adjusted level; colour = verdict)")
SMALL = 8  # points: the smallest text of a report figure (legends, crowded tick labels)
ACCURACY_RANGE = (0.0, 1.0)  # a band of accuracies is cut to it
REFERENCE_ZORDER = 4  # the reference curve above every other (equal curves hide under it)


def fitted(text: str, width_in: float, size: float = 12.0) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``size`` points (a title
    wider than its figure is clipped when saved); unchanged where it fits."""
    per_line = max(20, int(width_in * 72 / (0.55 * size)))
    return text if len(text) <= per_line else textwrap.fill(text, per_line)


def family_of(method: str, compressor: str) -> str:
    """The family of a method: "compressed uplinks" whenever the uplink is compressed, else the
    method's entry in ``FAMILIES`` ("other" for a method it does not know)."""
    if compressor != "none":
        return COMPRESSED
    return FAMILIES.get(method, OTHER)


def _alpha_text(alpha: float) -> str:
    return f"{alpha:g}"


def convergence_panels(runs: pd.DataFrame, families: tuple[Family, ...]
                       ) -> list[tuple[str, Any, str | None, list[str]]]:
    """(title, alpha, reference row or None, rows) per convergence panel: one per family and
    setting with runs, then the rows in no family by method group, only where there are runs."""
    panels: list[tuple[str, Any, str | None, list[str]]] = []
    in_family: set[tuple[Any, str]] = set()
    for fam in families:
        for alpha, sub in runs.groupby("alpha", sort=True):
            if fam.alpha is not None and not np.isclose(float(alpha), fam.alpha):
                continue
            rows = [r for r in fam.baselines if r in set(sub["row"])]
            if fam.reference in set(sub["row"]) and rows:
                panels.append((f"{fam.paper} ({fam.name})", alpha, fam.reference, rows))
                in_family.update((alpha, r) for r in fam.rows)
    for alpha, sub in runs.groupby("alpha", sort=True):
        groups: dict[str, list[str]] = {}
        for row, g in sub.groupby("row", sort=False):
            if (alpha, row) in in_family:
                continue
            first = g.iloc[0]
            groups.setdefault(family_of(str(first["method"]), str(first["compressor"])),
                              []).append(str(row))
        for title, rows in groups.items():
            for i in range(0, len(rows), 7):
                panels.append((f"{title}, not in a family", alpha, None, rows[i:i + 7]))
    return panels


def _mean_band(curves: Sequence[pd.Series]) -> tuple[pd.Index, np.ndarray, np.ndarray,
                                                    np.ndarray]:
    """Rounds, and per round the mean over seeds with the low/high of its 95 % t-interval."""
    frame = pd.concat(list(curves), axis=1).sort_index()
    intervals = [mean_interval(list(values)) for values in frame.to_numpy(dtype=float)]
    return (frame.index, np.array([i.mean for i in intervals]),
            np.array([i.low for i in intervals]), np.array([i.high for i in intervals]))


def _curve(ax: Axes, curves: Sequence[pd.Series], label: str, color: str,
           linestyle: str = "-", zorder: float = 2.0) -> None:
    """One row's mean curve, with its band (cut to an accuracy's range) where at least 2
    seeds report a round."""
    rounds, mean, low, high = _mean_band(curves)
    n = len(curves)
    ax.plot(rounds, mean, label=f"{label} (n={n})" if n > 1 else f"{label} (1 seed, no band)",
            color=color, linestyle=linestyle, zorder=zorder,
            linewidth=2.0 if zorder > 2 else 1.5)
    if n > 1:
        ax.fill_between(rounds, np.clip(low, *ACCURACY_RANGE), np.clip(high, *ACCURACY_RANGE),
                        color=color, alpha=0.2, linewidth=0, zorder=zorder - 1)


def convergence_png(panels: Sequence[tuple[str, Any, str | None, list[str]]],
                    runs: pd.DataFrame, acc: dict[str, pd.Series], path: Path) -> Figure:
    """Test accuracy per round in small multiples, one panel per (title, alpha, reference,
    rows) of ``panels`` (only panels with runs are given): each row's mean over seeds with its
    95 % t-interval band (cut to [0, 1]), labelled with its n, and the reference dashed in
    black, drawn last and on top (visible over a curve equal to it), first in the legend.

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
                       linestyle="--", zorder=REFERENCE_ZORDER)
        ax.set(xlabel="round", ylabel="test accuracy (global test set)")
        ax.set_title(fitted(f"{title}, Dirichlet α = {_alpha_text(alpha)}", 6.0))
        integer_ticks(ax)
        ax.grid(alpha=0.3)
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -0.02), min(high, 1.02))
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            first = sorted(range(len(labels)), key=lambda i: "(reference)" not in labels[i])
            ax.legend([handles[i] for i in first], [labels[i] for i in first], fontsize=SMALL,
                      loc="lower right")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(fitted(CONVERGENCE_TITLE, 6.5 * ncols))
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
                      fontsize=SMALL)
        ax.set(ylim=(len(sub) - 0.5, -0.5), title=fitted(fam, 6.5),
               xlabel=f"{sub['reference'].iloc[0]} − row (primary endpoint)")
        ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], marker="o", linestyle="", color=VERDICT_COLOURS[v], label=v)
               for v in VERDICTS]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=SMALL)
    fig.suptitle(FOREST_TITLE)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def client_accuracy_png(runs: pd.DataFrame, finals: dict[str, np.ndarray], path: Path) -> Figure:
    """Final per-client local accuracy of every row (all seeds pooled), a panel per alpha: a
    box per row (median line, mean triangle, quartile box, whiskers to 1.5 IQR, outlier
    clients as circles), with a legend that says so."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = _pyplot()
    alphas = sorted(runs["alpha"].unique())
    width = max(6.5, 0.55 * runs["row"].nunique() + 3)
    fig: Figure
    fig, axes = plt.subplots(len(alphas), 1, figsize=(width, 4.2 * len(alphas)),
                             squeeze=False, layout="constrained")
    for ax, alpha in zip(axes[:, 0], alphas, strict=True):
        sub = runs[runs["alpha"] == alpha]
        labels, data = [], []
        for row, group in sub.groupby("row", sort=False):
            labels.append(str(row))
            data.append(np.concatenate([finals[r] for r in group["run_id"]]))
        box = ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=60, ha="right",
                      fontsize=SMALL + 1)
        ax.set(ylabel="final local test accuracy per client", ylim=(0, 1))
        ax.set_title(fitted(f"Dirichlet α = {_alpha_text(alpha)}: clients of every seed "
                            "pooled", width))
        ax.grid(axis="y", alpha=0.3)
        median, mean = box["medians"][0], box["means"][0]
    fig.legend(handles=[
        Line2D([], [], color=median.get_color(), label="median"),
        Line2D([], [], linestyle="", marker=mean.get_marker(),
               markerfacecolor=mean.get_markerfacecolor(),
               markeredgecolor=mean.get_markeredgecolor(), label="mean"),
        Patch(facecolor="white", edgecolor="black", label="middle half (quartiles)"),
        Line2D([], [], linestyle="", marker="o", markerfacecolor="none",
               markeredgecolor="black", label="outlier clients (past 1.5 IQR)"),
    ], fontsize=SMALL, loc="outside lower center", ncol=4)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def accuracy_vs_gb_png(
    runs: pd.DataFrame, acc: dict[str, pd.Series], sent: dict[str, pd.Series], path: Path
) -> Figure:
    """Test accuracy against cumulative uplink GB for compressed rows (solid) and their
    uncompressed baselines (dotted), mean over seeds."""
    plt = _pyplot()
    fig: Figure
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for (row, alpha), group in runs.groupby(["row", "alpha"], sort=False):
        curves = [pd.concat([sent[r] / 1e9, acc[r]], axis=1, join="inner")
                  for r in group["run_id"]]
        mean = sum(c.to_numpy() for c in curves) / len(curves)
        style = "-" if (group["compressor"] != "none").any() else ":"
        ax.plot(mean[:, 0], mean[:, 1], style, label=f"{row} (α {_alpha_text(alpha)})",
                linewidth=2.0 if style == ":" else 1.5)
    ax.set(xscale="log", xlabel="uplink GB (cumulative)", ylabel="test accuracy",
           title="Accuracy vs communication (dotted: uncompressed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALL)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig
