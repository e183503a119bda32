"""Comparison report of a sweep: its finished runs from MLflow, as tables and plots.

This module gathers the runs from the store (``fedcore.tracking.sweep_runs``), decides the
families' comparisons and writes the files; the page, tables and words it writes are built by
``fedcore.report`` (page, summary, ranking, exploratory table, text, LaTeX, HTML page) from plain
data frames, without a store."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fedcore.core.round import code_digest
from fedcore.figures.privacy import accuracy_vs_epsilon_png
from fedcore.figures.simulated_time import accuracy_vs_time_png
from fedcore.report import page
from fedcore.report.across_settings import across_settings
from fedcore.report.families import forest_frame
from fedcore.report.files import write_all
from fedcore.report.html import report_page
from fedcore.report.paper_tables import write_latex
from fedcore.report.privacy import COLUMN, epsilon_text, private
from fedcore.report.reference import ReportInputError, resolve_reference
from fedcore.report.summary import summary_table as _summary_table
from fedcore.report.summary import with_training_state
from fedcore.report.text import description, figures_markdown
from fedcore.specs.families import ENDPOINTS
from fedcore.specs.sweep import SweepSpec
from fedcore.stats.looks import FamilyOutcome, family_outcomes, secondary_outcomes
from fedcore.tracking import figure_helper
from fedcore.tracking.family_runs import mlflow_section
from fedcore.tracking.mlflow_tracker import mlflow_client
from fedcore.tracking.parents import log_variant_table, set_description
from fedcore.tracking.provenance import current_code_label
from fedcore.tracking.settings import TrackingSettings, load_settings
from fedcore.tracking.sweep_runs import (
    clocks,
    final_client_accuracy,
    histories,
    other_code_hint,
    sweep_runs,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

@dataclass
class Report:
    """The runs of a sweep (one row per cell with a run), the per-row summary table, and the
    families' outcomes (primary endpoint, then secondary ones)."""

    runs: pd.DataFrame
    table: pd.DataFrame
    files: list[Path]
    outcomes: list[FamilyOutcome] = field(default_factory=list)
    secondary: list[FamilyOutcome] = field(default_factory=list)


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The report's summary (``fedcore.report.summary.summary_table``) with, where the runs
    spent a privacy budget, each row's ``epsilon_text``."""
    if "epsilon" not in runs:
        return _summary_table(runs)
    return _summary_table(runs, {"epsilon_text": lambda g: epsilon_text(
        list(g["epsilon"]), list(g["delta"]))})


def _checked_runs(spec: SweepSpec, settings: TrackingSettings, any_code: bool,
                  reference: str | None) -> tuple[pd.DataFrame, str, str]:
    """The sweep's runs, its reference row and the header's line on it; a report without a
    finished run, or with a reference that matches no row, stops here (``ReportInputError``)."""
    runs = sweep_runs(spec, settings, any_code)
    if runs.empty or not (runs["status"] == "FINISHED").any():
        other = "" if any_code else other_code_hint(spec, settings)
        by = "" if any_code else "made by this code "
        raise ReportInputError(f"sweep {spec.name!r}: no FINISHED run {by}of any of its "
                               f"{len(spec.cells)} cells{other}; run the sweep first")
    reference, note = resolve_reference(runs[runs["status"] == "FINISHED"], reference, spec.name)
    return runs, reference, note


def _curves(client: MlflowClient, runs: pd.DataFrame,
            last_k: int | None) -> tuple[pd.DataFrame, dict[str, pd.Series]]:
    """Each finished run's test-accuracy curve; ``last_k`` recomputes the primary endpoint as
    the mean of the last ``last_k`` evaluations of the curves."""
    ids = [r for r, st in zip(runs["run_id"], runs["status"], strict=True) if st == "FINISHED"]
    acc = histories(client, ids, "test/accuracy")
    if last_k is not None:
        runs = runs.assign(last_k=last_k, accuracy_last_k=[
            float(acc[r].iloc[-last_k:].mean()) if st == "FINISHED" else np.nan
            for r, st in zip(runs["run_id"], runs["status"], strict=True)])
    return runs, acc


def _figures(client: MlflowClient, spec: SweepSpec, finished: pd.DataFrame,
             acc: dict[str, pd.Series], outcomes: list[FamilyOutcome]) -> Callable[[Path], None]:
    """What the figures need from the store, read now; returned: what draws them into a
    folder."""
    from fedcore.figures.comparison_plots import (
        accuracy_vs_gb_png,
        client_accuracy_png,
        convergence_panels,
        convergence_png,
        family_forest_png,
    )

    with tempfile.TemporaryDirectory() as tmp:
        finals = {r: final_client_accuracy(uri, Path(tmp) / r) for r, uri in zip(
            finished["run_id"], finished["artifact_uri"], strict=True)}
    compressed = finished["compressor"] != "none"
    sent_runs = finished[compressed | (finished["method"].isin(["fedavg"]) & finished[
        "alpha"].isin(finished.loc[compressed, "alpha"]))] if compressed.any() else None
    sent = (histories(client, list(sent_runs["run_id"]), "comm/bytes_up_total")
            if sent_runs is not None else {})
    clock = clocks(client, finished)  # {} without a simulated clock

    def draw(stage: Path) -> None:
        convergence = figure_helper.draw_figure(  # the largest figure, on another core
            f"{convergence_png.__module__}.{convergence_png.__name__}",
            convergence_panels(finished, spec.families), finished, acc,
            stage / "convergence.png")
        family_forest_png(forest_frame(outcomes), stage / "forest.png")
        client_accuracy_png(finished, finals, stage / "client_accuracy.png")
        if sent_runs is not None:
            accuracy_vs_gb_png(sent_runs, acc, sent, stage / "accuracy_vs_gb.png")
        if private(finished):
            accuracy_vs_epsilon_png(finished, stage / "accuracy_vs_epsilon.png")
        if clock:
            accuracy_vs_time_png(finished, acc, clock, stage / "accuracy_vs_time.png")
        convergence.wait()

    return draw


def build_report(
    spec: SweepSpec,
    out_dir: str | Path,
    parent_run_id: str | None = None,
    settings: TrackingSettings | None = None,
    any_code: bool = False,
    reference: str | None = None,
    last_k: int | None = None,
    latex: bool = False,
) -> Report:
    """Write table.{md,html,csv}, runs.csv and the plots to ``out_dir``; log them to the parent.

    The report leads with one section per comparison family of the sweep (its verdicts on the
    primary endpoint, the seeds each took, secondary endpoints), then the exploratory table of
    every row (means and intervals, no verdicts). Rows are runs made by this code; ``any_code``
    tables each cell's newest run of any code. ``reference``: the row the exploratory table's
    detectable differences are computed against (None: ``fedavg``, else the first row, said in
    the header). ``last_k``: recompute the primary endpoint
    as the mean of the last ``last_k`` evaluations from the runs' histories. ``latex``: also
    write ``families.tex`` (a booktabs table per family) and ``statistics.md`` (the paper
    checklist's statistics paragraph).
    """
    settings = settings or load_settings()
    client = mlflow_client(settings)
    runs, reference, reference_note = _checked_runs(spec, settings, any_code, reference)
    runs, acc = _curves(client, runs, last_k)
    table = with_training_state(summary_table(runs), runs, acc)
    plan = spec.seed_plan
    outcomes = family_outcomes(runs, spec.families, plan)
    secondary = secondary_outcomes(runs, spec.families, plan)
    header = page.header(spec, runs, table, outcomes, code_header(runs, any_code),
                         reference_note)
    body = page.body(spec, runs, table, (outcomes, secondary), reference,
                     mlflow_section(outcomes, runs, spec.name, settings), COLUMN)
    draw = _figures(client, spec, runs[runs["status"] == "FINISHED"], acc, outcomes)

    def write(stage: Path) -> None:
        draw(stage)
        text = body + figures_markdown(stage) + across_settings(runs, reference, stage)
        (stage / "table.md").write_text(header + text)
        (stage / "summary.md").write_text(description(header, outcomes))
        (stage / "table.html").write_text(report_page(header + text, f"Sweep {spec.name}",
                                                      stage))
        table.to_csv(stage / "table.csv", index=False)
        runs.drop(columns="code").to_csv(stage / "runs.csv", index=False)
        if latex:
            write_latex(outcomes, table, runs, plan, stage)

    files = write_all(Path(out_dir), write)
    if parent_run_id is not None:
        for f in files:
            client.log_artifact(parent_run_id, str(f), "report")
        log_variant_table(client, parent_run_id, table,
                          ENDPOINTS[page.primary_endpoints(spec)[0]][0])
        set_description(client, parent_run_id, description(header, outcomes))
    return Report(runs, table, files, outcomes, secondary)


def code_header(runs: pd.DataFrame, any_code: bool) -> str:
    """The report's lines on which code made its rows; a warning when more than one did."""
    if not any_code:
        own = [] if runs.empty else list(dict.fromkeys(
            runs.loc[runs["code_digest"] != code_digest.current(), "code"]))
        plus = f" (cells with components of other packages: {'; '.join(own)})" if own else ""
        return (f"Rows: runs made by this {current_code_label()}{plus}; runs of other code "
                "count as missing (`fedcore report --any-code` includes them).\n\n")
    versions = runs.groupby("code_digest", sort=False)["code"].agg(["first", "count"])
    made_by = "; ".join(f"{count} by code {digest or '?'} ({label})"
                        for digest, (label, count) in versions.iterrows())
    line = f"Rows: the newest run of any code (`--any-code`): {made_by}.\n\n"
    if len(versions) > 1:
        line = (f"**Warning: these rows were made by {len(versions)} versions of the code; "
                "their numbers may not be comparable.**\n\n" + line)
    return line
