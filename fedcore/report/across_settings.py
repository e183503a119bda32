"""The report's across-settings section: its Markdown, its CSV of estimates and its figures (the
performance profiles and the critical-difference diagram, ``fedcore.figures.across_settings``),
from the estimators of ``fedcore.stats.aggregate``, over the rows that ran in two or more
settings."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from fedcore.core.component.seeding import numpy_rng
from fedcore.figures.across_settings import cd_diagram_png, profile_png
from fedcore.specs.rows import TUNABLE
from fedcore.stats.aggregate import (
    CONFIDENCE,
    LABELS,
    METRICS,
    REPS,
    Estimate,
    RankTest,
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


def _interval_text(value: float, low: float, high: float, fmt: str = ".4f") -> str:
    return Estimate(value, low, high, 0, 0).text(fmt)


def across_settings(runs: pd.DataFrame, reference: str, out: Path) -> str:
    """The "Across settings" section (``aggregate_section``) over
    the rows that ran in two or more settings and the settings they all share (none: ""); its
    files are written to ``out``."""
    done = runs[runs["status"] == "FINISHED"]
    columns = ["dataset", "alpha"] + [c for c in done.columns if c.startswith("grid:")
                                      and not c.removeprefix("grid:").startswith(TUNABLE)]
    # a key only some grids vary is missing (NaN) in the other cells: "" there
    keyed = done[columns].astype(object).where(done[columns].notna(), "").astype(str)
    settings = done.assign(_s=keyed.agg("|".join, axis=1))
    spans = settings.groupby("row")["_s"].agg(lambda x: frozenset(x))
    multi = spans[spans.map(len) >= 2]
    if multi.empty or reference not in multi.index:
        return ""
    shared = frozenset.intersection(*multi.tolist())
    if len(shared) < 2:
        return ""
    chosen = settings[settings["row"].isin(multi.index) & settings["_s"].isin(shared)]
    grid = [c for c in columns if c.startswith("grid:")]  # "" where a grid left the key unset
    chosen = chosen.assign(**{c: keyed.loc[chosen.index, c] for c in grid})
    text, _ = aggregate_section(chosen.drop(columns="_s"), reference, out, columns=columns)
    return "\n" + text + "\n"


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
