"""The report's across-settings section: its Markdown, its CSV of estimates and its figures (the
performance profiles and the critical-difference diagram), from the estimators of
``fedcore.stats.aggregate``.

The figures draw with pyplot on Agg, save the PNG, close the figure and return it, so that a caller
(or a test) can read what was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from fedcore.core.component.seeding import numpy_rng
from fedcore.stats.aggregate import (
    CONFIDENCE,
    LABELS,
    METRICS,
    REPS,
    Estimate,
    RankTest,
    cliques,
    common_seeds,
    complete_rows,
    groups_by_setting,
    performance_profile,
    profile_taus,
    rank_test,
    rows_in_order,
    setting_columns,
    setting_labels,
    summary_table,
)
from fedcore.tracking.comparison_plots import REFERENCE_ZORDER, SMALL, fitted
from fedcore.tracking.plots import _pyplot

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


def _interval_text(value: float, low: float, high: float, fmt: str = ".4f") -> str:
    return Estimate(value, low, high, 0, 0).text(fmt)


def aggregate_section(
    runs: pd.DataFrame,
    reference: str,
    out_dir: Path,
    *,
    metrics: Sequence[str] = METRICS,
    labels: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
    seed: int = 0,
    reps: int = REPS,
) -> tuple[str, list[Path]]:
    """The report's "Across settings" section: Markdown and the files it links (a CSV of the
    estimates, a performance profile per metric, a critical-difference diagram per metric when
    there are enough settings), written to ``out_dir``. ``runs``: one row per run with columns
    ``row``, ``seed``, the setting columns and ``metrics`` (absent metrics are skipped)."""
    missing = [c for c in ("row", "seed") if c not in runs.columns]
    if missing:
        raise ValueError(f"runs: missing column(s) {', '.join(missing)}")
    if reference not in set(runs["row"].astype(str)):
        raise ValueError(f"reference: {reference!r} is not a row of the runs; allowed: "
                         f"{', '.join(rows_in_order(runs))}")
    names = {**LABELS, **(labels or {})}
    cols = setting_columns(runs) if columns is None else list(columns)
    complete = complete_rows(runs, cols)
    lines = _settings_lines(runs, cols, complete)
    if reference not in complete or len(complete) < 2:
        why = (f"the reference {reference} did not run in every setting"
               if reference not in complete else "fewer than two rows ran in every setting")
        return "\n".join([*lines, "", f"No aggregate: {why}.", ""]), []
    runs = runs[runs["row"].astype(str).isin(complete)]
    seeds = common_seeds(runs, cols)
    if not seeds:
        return "\n".join([*lines, "", "No aggregate: no seed was run by every row in every "
                          "setting.", ""]), []
    dropped = int((~runs["seed"].isin(seeds)).sum())
    runs = runs[runs["seed"].isin(seeds)]
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    lines += _pooling_lines(seeds, dropped, reference, reps)
    tables = []
    for metric in [m for m in metrics if m in runs.columns and runs[m].notna().any()]:
        label = names.get(metric, metric)
        table = summary_table(runs, reference, metric, columns=cols, seed=seed, reps=reps)
        test = rank_test(runs, metric, cols)
        table["average_rank"] = table["row"].map(test.ranks)
        tables.append(table)
        lines += [f"### {label}", "", *_estimates_lines(table, reference)]
        profiles = {
            row: performance_profile(
                groups_by_setting(runs, row, metric, cols), profile_taus(runs, metric),
                numpy_rng(seed, "profile", metric, row), reps)
            for row in rows_in_order(runs, reference)
        }
        path = out_dir / f"profile_{_slug(metric)}.png"
        profile_png(profiles, label, reference, path)
        files.append(path)
        lines += _profile_lines(label, path)
        lines += _rank_lines(test, metric, label, out_dir, files)
    if tables:
        path = out_dir / "aggregate.csv"
        pd.concat(tables, ignore_index=True).to_csv(path, index=False)
        files.append(path)
    return "\n".join(lines).rstrip() + "\n", files


def _settings_lines(runs: pd.DataFrame, cols: list[str], complete: list[str]) -> list[str]:
    """The section's title, its settings and the rows left out of the pool."""
    settings = sorted(setting_labels(runs, cols).unique())
    left_out = [r for r in rows_in_order(runs) if r not in complete]
    lines = [
        "## Across settings", "",
        f"{len(settings)} settings ({', '.join(c.removeprefix('grid:') for c in cols)}): "
        + "; ".join(f"`{s}`" for s in settings) + ".",
    ]
    if left_out:
        lines.append(f"Only rows that ran in every setting are pooled; left out: "
                     f"{', '.join(left_out)}.")
    return lines


def _pooling_lines(seeds: list[int], dropped: int, reference: str, reps: int) -> list[str]:
    """How the runs are pooled: the seeds, IQM, its interval and P(> reference)."""
    return [
        f"On the {len(seeds)} seeds every row ran in every setting ({_seed_text(seeds)})"
        + (f"; {dropped} runs on other seeds (a look's extra seeds) are left out" if dropped
           else "")
        + ", so every setting weighs the same in every row. IQM: interquartile mean "
        f"(the mean of the middle half of the runs), with a {CONFIDENCE:.0%} stratified "
        f"bootstrap interval ({reps} replicates, seeds redrawn within each setting). "
        f"P(> {reference}): per setting, the share of seeds on which the row beats the "
        "reference run of the same seed (paired: a seed fixes partition, initial model and "
        "client sampling; ties count half), averaged over the settings with equal weight; "
        "its interval redraws the seeds within each setting; 0.5 is no difference.", "",
    ]


def _estimates_lines(table: pd.DataFrame, reference: str) -> list[str]:
    """One metric's table: each row's runs, settings, IQM, P(> reference) and average rank."""
    lines = [f"| row | runs | settings | IQM [{CONFIDENCE:.0%} CI] | "
             f"P(> {reference}) [{CONFIDENCE:.0%} CI] | average rank |",
             "|---|---:|---:|---|---|---:|"]
    for r in table.itertuples(index=False):
        poi = ("reference" if r.row == reference else
               _interval_text(r.p_improvement, r.p_improvement_low, r.p_improvement_high,
                              ".3f"))
        rank = "" if math.isnan(r.average_rank) else f"{r.average_rank:.2f}"
        lines.append(f"| {r.row} | {r.runs} | {r.settings} | "
                     f"{_interval_text(r.iqm, r.iqm_low, r.iqm_high)} | {poi} | {rank} |")
    return lines


def _profile_lines(label: str, path: Path) -> list[str]:
    """The performance profile's figure link and how to read it."""
    return ["", f"![performance profile, {label}]({path.name})", "",
            f"Performance profile: the fraction of a row's runs with {label} above tau "
            f"(band: {CONFIDENCE:.0%} stratified bootstrap interval). Where one curve "
            "lies above another, that row's runs clear the threshold more often.", ""]


def _rank_lines(test: RankTest, metric: str, label: str, out_dir: Path,
                files: list[Path]) -> list[str]:
    """The average ranks' words and, where the test ran, the critical-difference diagram
    (drawn to ``out_dir`` and added to ``files``)."""
    if test.reason:
        return [f"Average ranks over {test.settings} settings (1 = best); no "
                f"critical-difference diagram: {test.reason}.", ""]
    path = out_dir / f"cd_{_slug(metric)}.png"
    cd_diagram_png(test.ranks, test.cd, label, path)
    files.append(path)
    return [f"![critical difference, {label}]({path.name})", "",
            f"Average ranks over {test.settings} settings (1 = best). Friedman's "
            f"test: chi-square {test.statistic:.2f}, p = {test.p:.3g}. Rows joined "
            f"by a bar differ by less than the Nemenyi critical difference "
            f"{test.cd:.2f} at {test.level:.0%} (Demšar 2006): their ranks are not "
            "told apart.", ""]


def _seed_text(seeds: Sequence[int]) -> str:
    """``seeds 0-4`` for a run of consecutive seeds, else ``seeds 0, 2, 5``."""
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seed" + ("s " if len(seeds) > 1 else " ") + ", ".join(map(str, seeds))


def _slug(metric: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in metric)
