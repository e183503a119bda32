"""Comparison report of a sweep: its finished runs from MLflow, as tables and plots.

This module gathers the runs from the store, decides the families' comparisons and writes the
files; the tables and words it writes are built by ``fedcore.report`` (summary, ranking,
exploratory table, text, HTML page) from plain data frames, without a store."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedcore.core.round import code_digest
from fedcore.report.exploratory import (
    detectable_vs_reference,
    exploratory_table,
    markdown_table,
)
from fedcore.report.families import endpoint_text, family_markdown, forest_frame
from fedcore.report.files import write_all, write_text_atomic
from fedcore.report.html import report_page
from fedcore.report.ranking import ranking_markdown
from fedcore.report.summary import COLUMNS, training_header, with_training_state
from fedcore.report.summary import summary_table as _summary_table
from fedcore.report.text import (
    counts_line,
    description,
    early_text,
    explanation,
    figures_markdown,
    plan_text,
)
from fedcore.specs.families import DEFAULT_ENDPOINT, ENDPOINTS, SeedPlan
from fedcore.specs.hparams import row_regime
from fedcore.specs.rows import TUNABLE, is_tuned
from fedcore.specs.sweep import SweepSpec
from fedcore.stats.comparison import canonical, reference_rows
from fedcore.stats.looks import FamilyOutcome, family_outcomes, secondary_outcomes
from fedcore.tracking import privacy_report, time_report
from fedcore.tracking.family_runs import mlflow_section
from fedcore.tracking.mlflow_tracker import CONVERGED_TAG, get_experiment_id, mlflow_client
from fedcore.tracking.parents import log_variant_table, set_description
from fedcore.tracking.provenance import (
    CODE_DIGEST_TAG,
    COMMIT_TAG,
    DIRTY_TAG,
    code_label,
    current_code_label,
)
from fedcore.tracking.run_store import MlflowRunStore
from fedcore.tracking.runner import finished_run, other_code_runs, runs_with_hash
from fedcore.tracking.settings import TrackingSettings, load_settings

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

DEFAULT_REFERENCE = "fedavg"
@dataclass
class Report:
    """The runs of a sweep (one row per cell with a run), the per-row summary table, and the
    families' outcomes (primary endpoint, then secondary ones)."""

    runs: pd.DataFrame
    table: pd.DataFrame
    files: list[Path]
    outcomes: list[FamilyOutcome] = field(default_factory=list)
    secondary: list[FamilyOutcome] = field(default_factory=list)


def finished_by_cell(spec: SweepSpec, settings: TrackingSettings) -> dict[tuple[str, str], Run]:
    """The newest FINISHED run of each (config hash, code digest) among ``spec``'s cells' code
    digests: one paged search per digest (a sweep of built-in methods has one), where asking
    cell by cell took a search each."""
    found: dict[tuple[str, str], Run] = {}
    store = MlflowRunStore(settings)
    for code in {code_digest.of_config(c.config) for c in spec.cells}:
        for run in store.finished_of_code(code):  # newest first: the first one of a hash wins
            found.setdefault((run.data.tags.get("config_hash", ""), code), run)
    return found


def sweep_runs(
    spec: SweepSpec, settings: TrackingSettings | None = None, any_code: bool = False
) -> pd.DataFrame:
    """The latest FINISHED run made by this code (by any code with ``any_code``) of every cell of
    ``spec``, else its latest FAILED run (``status`` FAILED, ``failure`` its reason: a diverged
    seed stays in its row); cells with neither are left out. With the code that made each run
    (``commit``, ``dirty``, ``code_digest``). Rows keep the sweep's cell order within each
    (dataset, alpha).
    """
    settings = settings or load_settings()
    varied = sorted({k for c in spec.cells for k in c.overrides} - {"seed", "method"} -
                    {"dataset.name", "dataset.alpha"})
    rows: list[dict[str, Any]] = []
    known = None if any_code else finished_by_cell(spec, settings)  # any code: cell by cell
    for cell in spec.cells:
        cfg = cell.config
        h = cfg.config_hash()
        code = None if any_code else code_digest.of_config(cfg)
        run = (known.get((h, code)) if known is not None and code is not None
               else finished_run(h, settings, any_code=True))
        status, failure = "FINISHED", ""
        if run is None:
            failed = runs_with_hash(h, "= 'FAILED'", 1, settings, code=code)
            if not failed:
                continue
            run, status = failed[0], "FAILED"
            failure = _failure_text(run.data.tags.get("failure_reason", "failed"))
        mode = row_regime(cfg.resolved(), cell.row, cell.overrides)  # a study's parts: tuned
        tuned = is_tuned(cell.row)
        row = {
            "run_id": run.info.run_id,
            "artifact_uri": run.info.artifact_uri,
            "config_hash": h,
            "row": cell.row,
            "method": cfg.method.name,
            "hparams": mode.label,
            "tuning": spec.tuning_text(cfg.method.name) if tuned else "",
            "dataset": cfg.dataset.name,
            "alpha": cfg.dataset.alpha,
            "seed": cfg.seed,
            "status": status,
            "failure": failure,
            "compressor": cfg.method.compression.get("compressor", "none"),
            **{f"grid:{k}": canonical(cell.overrides.get(k)) for k in varied},
            "commit": run.data.tags.get(COMMIT_TAG, ""),
            "dirty": run.data.tags.get(DIRTY_TAG, ""),
            "code_digest": run.data.tags.get(CODE_DIGEST_TAG, ""),
            "code": code_label(run.data.tags),
            "stopped_early": run.data.tags.get(CONVERGED_TAG, ""),
            "rounds": cfg.rounds,
            "last_k": cfg.last_k,
            "eval_every": cfg.eval_every,
        }
        for key, metric, _ in COLUMNS:
            row[key] = run.data.metrics.get(metric, np.nan) if status == "FINISHED" else np.nan
        row["epsilon"], row["delta"] = (privacy_report.run_privacy(run) if status == "FINISHED"
                                        else (np.nan, np.nan))
        row["gb_sent"] = row["gb_sent"] / 1e9
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values(["dataset", "alpha"], kind="stable").reset_index(drop=True)
    return frame


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The report's summary (``fedcore.report.summary.summary_table``) with, where the runs
    spent a privacy budget, each row's ``epsilon_text``."""
    if "epsilon" not in runs:
        return _summary_table(runs)
    return _summary_table(runs, {"epsilon_text": lambda g: privacy_report.epsilon_text(
        list(g["epsilon"]), list(g["delta"]))})


def _failure_text(reason: str) -> str:
    """``diverged at round 7`` from a run's failure reason, else its first line."""
    found = re.search(r"diverged at round \d+", reason)
    return found.group(0) if found else reason.splitlines()[0][:120]


def _histories(client: MlflowClient, run_ids: list[str], metric: str) -> dict[str, pd.Series]:
    out = {}
    for run_id in run_ids:
        hist = client.get_metric_history(run_id, metric)
        series = pd.Series({m.step: m.value for m in sorted(hist, key=lambda m: m.timestamp)})
        out[run_id] = series.sort_index()
    return out


def _final_client_accuracy(artifact_uri: str, tmp: Path) -> np.ndarray:
    """The last evaluated round's per-client accuracies, read from the run's artifact folder
    (its URI straight away: a ``runs:/`` download first searches the run's logged models)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    tmp.mkdir(parents=True, exist_ok=True)
    repository = get_artifact_repository(artifact_uri)
    local = repository.download_artifacts(  # type: ignore[no-untyped-call]
        "per_client.parquet", str(tmp))
    frame = pd.read_parquet(local)
    last = frame[frame["round"] == frame["round"].max()]
    accuracy: np.ndarray = last["accuracy"].dropna().to_numpy()
    return accuracy


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
    from fedcore.tracking.comparison_plots import (
        accuracy_vs_gb_png,
        client_accuracy_png,
        convergence_panels,
        convergence_png,
        family_forest_png,
    )

    settings = settings or load_settings()
    client = mlflow_client(settings)
    runs = sweep_runs(spec, settings, any_code)
    if runs.empty or not (runs["status"] == "FINISHED").any():
        other = "" if any_code else _other_code_hint(spec, settings)
        by = "" if any_code else "made by this code "
        raise ReportInputError(f"sweep {spec.name!r}: no FINISHED run {by}of any of its "
                          f"{len(spec.cells)} cells{other}; run the sweep first")
    reference, reference_note = resolve_reference(runs[runs["status"] == "FINISHED"],
                                                  reference, spec.name)
    out = Path(out_dir)
    ids = [r for r, st in zip(runs["run_id"], runs["status"], strict=True) if st == "FINISHED"]
    acc = _histories(client, ids, "test/accuracy")
    if last_k is not None:
        runs = runs.assign(last_k=last_k, accuracy_last_k=[
            float(acc[r].iloc[-last_k:].mean()) if st == "FINISHED" else np.nan
            for r, st in zip(runs["run_id"], runs["status"], strict=True)])
    table = with_training_state(summary_table(runs), runs, acc)
    plan = spec.seed_plan
    outcomes = family_outcomes(runs, spec.families, plan)
    secondary = secondary_outcomes(runs, spec.families, plan)
    pretty = exploratory_table(table, detectable_vs_reference(runs, reference),
                               epsilon_column=privacy_report.COLUMN)
    header = (f"# Sweep `{spec.name}`\n\n{counts_line(spec, runs, outcomes)}\n\n"
              + code_header(runs, any_code) + reference_note
              + "**Primary endpoint** (declared in the sweep file before it ran): "
              + "; ".join(endpoint_text(runs, e) for e in dict.fromkeys(
                  [f.endpoint for f in spec.families] or [DEFAULT_ENDPOINT]))
              + f". **Seed plan**: {plan_text(plan)}.\n\n" + training_header(table)
              + early_text(runs))
    families_md = family_markdown(outcomes, secondary, table, plan, runs)
    in_mlflow = mlflow_section(outcomes, runs, spec.name, settings)
    body = ("## Families: each paper's question\n\n" + families_md + "\n\n"
            if families_md else "*No comparison family is declared: the tables below are "
            "exploratory (no verdicts).*\n\n")
    primary = next(iter(dict.fromkeys([f.endpoint for f in spec.families]
                                      or [DEFAULT_ENDPOINT])))
    body += ranking_markdown(table, ENDPOINTS[primary][0], endpoint_text(runs, primary),
                             higher=ENDPOINTS[primary][1]) + "\n"
    body += in_mlflow
    body += ("## Every row (exploratory: means and intervals, no verdicts)\n\n"
             + markdown_table(pretty) + "\n\nThe other columns (Jain's index, the mean "
             "accuracy over evaluations, the clients' spread, the participation gap and the "
             "unseen-client counts, the personal models' details, the tuning study) are in "
             "`table.csv`, a line per row.\n\n"
             + explanation(reference, spec) + "\n")
    finished = runs[runs["status"] == "FINISHED"]
    with tempfile.TemporaryDirectory() as tmp:
        finals = {r: _final_client_accuracy(uri, Path(tmp) / r) for r, uri in zip(
            finished["run_id"], finished["artifact_uri"], strict=True)}
    compressed = finished["compressor"] != "none"
    sent_runs = finished[compressed | (finished["method"].isin(["fedavg"]) & finished[
        "alpha"].isin(finished.loc[compressed, "alpha"]))] if compressed.any() else None
    sent = (_histories(client, list(sent_runs["run_id"]), "comm/bytes_up_total")
            if sent_runs is not None else {})

    clock = time_report.clocks(client, finished)  # {} without a simulated clock

    def write(stage: Path) -> None:
        convergence_png(convergence_panels(finished, spec.families), finished, acc,
                        stage / "convergence.png")
        family_forest_png(forest_frame(outcomes), stage / "forest.png")
        client_accuracy_png(finished, finals, stage / "client_accuracy.png")
        if sent_runs is not None:
            accuracy_vs_gb_png(sent_runs, acc, sent, stage / "accuracy_vs_gb.png")
        if privacy_report.private(finished):
            privacy_report.accuracy_vs_epsilon_png(finished, stage / "accuracy_vs_epsilon.png")
        if clock:
            time_report.accuracy_vs_time_png(finished, acc, clock, stage / "accuracy_vs_time.png")
        text = body + figures_markdown(stage) + across_settings(runs, reference, stage)
        (stage / "table.md").write_text(header + text)
        (stage / "summary.md").write_text(description(header, outcomes))
        (stage / "table.html").write_text(report_page(header + text, f"Sweep {spec.name}",
                                                      stage))
        table.to_csv(stage / "table.csv", index=False)
        runs.drop(columns="code").to_csv(stage / "runs.csv", index=False)
        if latex:
            write_latex(outcomes, table, runs, plan, stage)

    files = write_all(out, write)
    if parent_run_id is not None:
        for f in files:
            client.log_artifact(parent_run_id, str(f), "report")
        log_variant_table(client, parent_run_id, table, ENDPOINTS[next(iter(
            [f.endpoint for f in spec.families] or [DEFAULT_ENDPOINT]))][0])
        set_description(client, parent_run_id, description(header, outcomes))
    return Report(runs, table, files, outcomes, secondary)


class ReportInputError(LookupError):
    """A report that what was asked for cannot give: no finished run, or a reference that
    matches no row (the command line's exit code 2)."""


def resolve_reference(finished: pd.DataFrame, reference: str | None,
                      sweep: str) -> tuple[str, str]:
    """The reference row of the exploratory table and the header's line on it ("" unless it
    is the first row by default): ``reference`` when it matches a row of ``finished``, else
    (None) ``fedavg`` when it does, else the sweep's first row."""
    rows = list(dict.fromkeys(finished["row"].astype(str)))
    if reference is not None:
        if not reference_rows(finished, reference):
            raise ReportInputError(
                f"reference {reference!r} matches no row of sweep {sweep!r} (a method with "
                f"one row per setting, or a row label); rows: {', '.join(rows)}")
        return reference, ""
    if reference_rows(finished, DEFAULT_REFERENCE):
        return DEFAULT_REFERENCE, ""
    return rows[0], (f"**Reference row**: `{rows[0]}`, the sweep's first row (it has no "
                     f"`{DEFAULT_REFERENCE}` row; `--reference ROW` picks another).\n\n")


def across_settings(runs: pd.DataFrame, reference: str, out: Path) -> str:
    """The "Across settings" section (``fedcore.tracking.aggregate_plots.aggregate_section``) over
    the rows that ran in two or more settings and the settings they all share (none: ""); its
    files are written to ``out``."""
    from fedcore.tracking.aggregate_plots import aggregate_section

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


def write_latex(outcomes: list[FamilyOutcome], table: pd.DataFrame, runs: pd.DataFrame,
                plan: SeedPlan, out: Path) -> list[Path]:
    """``families.tex``: a booktabs table per family and setting, or for a sweep without
    families an exploratory one per setting (``fedcore.report.paper_tables``);
    ``statistics.md``: the checklist paragraph, with the seeds each row ran."""
    from fedcore.report.latex import statistics_statement
    from fedcore.report.paper_tables import families_tex

    correction = f"Holm at 5 % / {len(plan.looks)} look(s) within the family"
    tex = out / "families.tex"
    write_text_atomic(tex, families_tex(outcomes, table, int(runs["last_k"].max()), correction))
    stats_md = out / "statistics.md"
    margins = {o.family.margin for o in outcomes} or {0.01}
    write_text_atomic(stats_md, statistics_statement(
        seeds=[int(n) for n in table["seeds"] if n > 0],
        endpoint="; ".join(endpoint_text(runs, e) for e in dict.fromkeys(
            o.endpoint for o in outcomes)) or endpoint_text(runs, DEFAULT_ENDPOINT),
        interval="95 % Student-t interval of the mean over seeds (per row); for a comparison, "
        "the t-interval of the paired differences at the family's Holm-adjusted level",
        test="two-sided paired t-test on per-seed differences, TOST for equivalence",
        correction=f"Holm within each family, at 5 % / {len(plan.looks)} look(s) "
        f"(looks at {', '.join(map(str, plan.looks))} seeds)",
        families=[o.family.name for o in outcomes] or ["none (exploratory)"],
        equivalence_margin=max(margins)) + "\n")
    return [tex, stats_md]


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


def _other_code_hint(spec: SweepSpec, settings: TrackingSettings) -> str:
    """`` (N have runs of other code: ...)`` for the error of a report without rows."""
    other = other_code_runs((c.config for c in spec.cells), settings)
    return (f" ({len(other)} have FINISHED runs of other code: rerun the sweep, or report "
            "them with --any-code)" if other else "")


def sweep_parent_run(spec: SweepSpec, settings: TrackingSettings | None = None) -> str | None:
    """The sweep's parent run id (by sweep hash), if the sweep has been started."""
    settings = settings or load_settings()
    client = mlflow_client(settings)
    found = client.search_runs(
        [get_experiment_id(client, settings)],
        filter_string=f"tags.sweep_hash = '{spec.sweep_hash}'",
        max_results=1,
    )
    return found[0].info.run_id if found else None
