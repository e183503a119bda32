"""Comparison report of a sweep: its finished runs from MLflow, as tables and plots."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedcore.core.round import code_digest
from fedcore.core.runtime import faults
from fedcore.pipeline.comparison import canonical, half_width, reference_rows, with_intervals
from fedcore.pipeline.families import (
    DEFAULT_ENDPOINT,
    ENDPOINTS,
    Family,
    FamilyOutcome,
    SeedPlan,
    family_outcomes,
    rows_to_run,
    secondary_outcomes,
)
from fedcore.pipeline.hparams import row_regime
from fedcore.pipeline.rows import TUNABLE, is_tuned
from fedcore.pipeline.stats import (
    DIFFERENCE_RANGE,
    VALUE_RANGE,
    detectable_difference,
    no_resolution,
    paired_seeds,
    seeds_for,
)
from fedcore.pipeline.sweep import SweepSpec
from fedcore.pipeline.training_state import CLIMBING, MIN_CHANGE, NOISE_SE, training_state
from fedcore.report.html import report_page
from fedcore.report.ranking import ranking_markdown, short_training
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

GROUP = ["row", "method", "hparams", "tuning", "dataset", "alpha"]
DEFAULT_REFERENCE = "fedavg"
COLUMNS = [
    ("accuracy_last_k", "final/accuracy_last_k", "accuracy, mean of last k"),
    ("accuracy", "final/accuracy", "final accuracy"),
    ("worst10", "final/accuracy_worst10", "worst-10 %"),
    ("client_std", "final/accuracy_std", "client accuracy std"),
    ("jain", "clients/jain_index", "Jain"),
    ("auc", "auc/accuracy", "mean accuracy over evaluations"),
    ("rounds_to_target", "rounds_to_target", "rounds to target"),
    ("gb_sent", "comm/bytes_up_total", "GB sent"),
    # with dataset.holdout_clients: the global model on clients that never trained
    ("unseen_accuracy", "final/unseen_accuracy", "unseen-client accuracy"),
    ("participation_gap", "final/participation_gap", "participation gap"),
    ("unseen_clients", "final/unseen_clients", "unseen clients"),
    ("unseen_samples", "final/unseen_samples", "unseen test samples"),
    # personalised methods (Ditto): their personal models; blank for every other method
    ("personal_accuracy", "final/personal_accuracy_mean", "personal accuracy"),
    ("personal_worst10", "final/personal_accuracy_worst10", "personal worst-10 %"),
    ("personal_std", "final/personal_accuracy_std", "personal std"),
    ("personal_jain", "final/personal_jain", "personal Jain"),
]
PERSONAL = {key for key, metric, _ in COLUMNS if metric.startswith("final/personal_")} | {
    "unseen_accuracy", "participation_gap", "unseen_clients",
    "unseen_samples"}  # blank where a run does not have them
# the range of each bounded column: its intervals are cut to it (docs/explanation/statistics.md)
BOUNDS = {**{key: VALUE_RANGE for key in (
    "accuracy_last_k", "accuracy", "worst10", "jain", "auc", "unseen_accuracy",
    "personal_accuracy", "personal_worst10", "personal_jain")},
    "client_std": (0.0, 0.5), "personal_std": (0.0, 0.5), "participation_gap": DIFFERENCE_RANGE}
DISCRETE = ("accuracy", "worst10", "rounds_to_target")  # steps of 1/|test set|, clients, rounds


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


def _failure_text(reason: str) -> str:
    """``diverged at round 7`` from a run's failure reason, else its first line."""
    found = re.search(r"diverged at round \d+", reason)
    return found.group(0) if found else reason.splitlines()[0][:120]


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per row x dataset x alpha (x varied keys): seeds finished and failed, and per column the
    mean over finished seeds with its 95 % t-interval (``<key>_mean``, ``_low``, ``_high``,
    ``_n``); ``reached_target``: the seeds that reached the target."""
    keys = _group_keys(runs)
    runs = runs.assign(**{k: runs[k].astype(object).where(runs[k].notna(), "")
                          for k in keys if k.startswith("grid:")})  # NaN keys never match
    table = with_intervals(runs, [key for key, _, _ in COLUMNS], keys,  # NaN: failed seeds
                           BOUNDS)
    if table.empty:
        return table
    groups = runs.groupby(keys, sort=False, dropna=False)
    done = {k: int((g["status"] == "FINISHED").sum()) for k, g in groups}
    failed = {k: list(g.loc[g["status"] != "FINISHED", "failure"]) for k, g in groups}
    reached = {k: list(g.loc[g["status"] == "FINISHED", "rounds_to_target"]) for k, g in groups}
    index = [tuple(r) if len(keys) > 1 else r[0] for r in table[keys].itertuples(index=False)]
    table["seeds"] = [done.get(i, 0) for i in index]  # finished seeds
    table["failed"] = [len(failed.get(i, [])) for i in index]
    table["failures"] = ["; ".join(failed.get(i, [])) for i in index]
    table["reached_target"] = [int(np.isfinite(np.asarray(reached.get(i, []), float)).sum())
                               for i in index]
    horizon = {k: int(g["rounds"].max()) for k, g in groups}
    table["target_text"] = [target_text(reached.get(i, []), horizon.get(i, 0)) for i in index]
    if "epsilon" in runs:
        spent = {k: (list(g["epsilon"]), list(g["delta"])) for k, g in groups}
        table["epsilon_text"] = [privacy_report.epsilon_text(*spent.get(i, ([], [])))
                                 for i in index]
    return table


def with_training_state(table: pd.DataFrame, runs: pd.DataFrame,
                        acc: dict[str, pd.Series]) -> pd.DataFrame:
    """``table`` with each row's training state at its endpoint (``training``: its text,
    ``climbing``: whether it was still climbing), from the finished seeds' test-accuracy
    histories ``acc`` (run id -> accuracy by round) and the endpoint's window ``last_k``."""
    if table.empty:
        return table
    keys = _group_keys(runs)
    runs = runs.assign(**{k: runs[k].astype(object).where(runs[k].notna(), "")
                          for k in keys if k.startswith("grid:")})
    states = {}
    for key, g in runs.groupby(keys, sort=False, dropna=False):
        ok = g[g["status"] == "FINISHED"]
        curves = [list(acc[r].to_numpy(dtype=float)) for r in ok["run_id"] if r in acc]
        states[key] = training_state(curves, int(g["last_k"].max()))
    index = [tuple(r) if len(keys) > 1 else r[0] for r in table[keys].itertuples(index=False)]
    found = [states.get(i) for i in index]
    return table.assign(training=["" if st is None else st.text() for st in found],
                        climbing=[st is not None and st.state == CLIMBING for st in found])


def training_header(table: pd.DataFrame) -> str:
    """The header's count of rows still climbing at their endpoint, with the rule."""
    if "climbing" not in table or table.empty:
        return ""
    climbing = int(table["climbing"].sum())
    return (f"**Training state at the endpoint**: {climbing} of {len(table)} rows still "
            f"climbing (mean change of test accuracy between the last two windows of k "
            f"evaluations at least {MIN_CHANGE:g} and above {NOISE_SE:g} standard errors of its "
            "seed-to-seed spread; column `training`)"
            + ("; their endpoint is not the method's plateau." if climbing else ".") + "\n\n")


def target_text(rounds: list[float], horizon: int) -> str:
    """Rounds to target with its censoring: ``median 14 (3/3 reached)``, ``> 20 (1/3 reached)``
    (a seed that never reached the target is censored at the horizon, never left out)."""
    values = np.asarray(rounds, dtype=float)
    n = len(values)
    if n == 0:
        return "—"
    hit = np.sort(values[np.isfinite(values)])
    need = n // 2 + 1 if n % 2 == 0 else (n + 1) // 2  # the seed whose value is the median
    median = f"median {hit[need - 1]:.0f}" if len(hit) >= need else f"> {horizon}"
    return f"{median} ({len(hit)}/{n} reached)"


def _group_keys(frame: pd.DataFrame) -> list[str]:
    """row, method, regime, dataset, alpha and any other key the sweep varies (seeds are the
    repetitions within a group)."""
    return [c for c in frame.columns if c in GROUP or c.startswith("grid:")]


SHOWN = ("accuracy_last_k", "accuracy", "worst10", "rounds_to_target")  # what a reader compares
SHOWN_IF_ANY = ("personal_accuracy", "unseen_accuracy")  # where a row has it


def _formatted(table: pd.DataFrame, detectable: dict[tuple[Any, ...], str]) -> pd.DataFrame:
    """The exploratory table, narrowed to what a reader compares: per row its setting, regime,
    seeds (finished, failed), the primary endpoint with its 95 % interval, the training state,
    final and worst-10 % accuracy, rounds to target, the detectable difference to the reference
    row (personal and unseen-client accuracy where a row has them, GB sent where rows differ in
    it, the dataset where there are several); no verdicts. Every other column is in
    ``table.csv``."""
    out = table[["row", "hparams"]].rename(columns={"hparams": "regime"})
    if "epsilon_text" in table and (table["epsilon_text"] != "∞").any():  # a private row
        out[privacy_report.COLUMN] = list(table["epsilon_text"])
    if table["dataset"].nunique() > 1:  # one dataset: named by the ranking's headings
        out["dataset"] = list(table["dataset"])
    out["alpha"] = list(table["alpha"])
    out["seeds"] = [f"{n}" if not f else f"{n} of {n + f} finished; {f} failed: {why}"
                    for n, f, why in zip(table["seeds"], table["failed"], table["failures"],
                                         strict=True)]
    sent = table["gb_sent_mean"].dropna()
    shown = [*SHOWN, *(k for k in SHOWN_IF_ANY if table[f"{k}_mean"].notna().any())]
    if len(sent) > 1 and sent.max() > 1.01 * sent.min():  # compressed and uncompressed rows
        shown.append("gb_sent")
    fmt = {"gb_sent": ".4g"}
    for key, _, label in COLUMNS:
        if key not in shown:
            continue
        if key == "rounds_to_target":
            out[label] = list(table["target_text"])
            continue
        f = fmt.get(key, ".4f")
        out[label] = [
            "" if key in PERSONAL and np.isnan(m) else half_width(m, lo, hi, n, f, ok)
            for m, lo, hi, n, ok in zip(table[f"{key}_mean"], table[f"{key}_low"],
                                        table[f"{key}_high"], table[f"{key}_n"],
                                        table[f"{key}_resolved"], strict=True)
        ]
        if key == "accuracy_last_k" and "training" in table:
            out["training at the endpoint"] = [short_training(str(s)) for s in table["training"]]
    out["detectable Δ vs ref"] = [
        detectable.get((d, a, r), "") for d, a, r in
        zip(table["dataset"], table["alpha"], table["row"], strict=True)]
    return out


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table of ``frame`` (no index)."""
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _histories(client: MlflowClient, run_ids: list[str], metric: str) -> dict[str, pd.Series]:
    out = {}
    for run_id in run_ids:
        hist = client.get_metric_history(run_id, metric)
        series = pd.Series({m.step: m.value for m in sorted(hist, key=lambda m: m.timestamp)})
        out[run_id] = series.sort_index()
    return out


def endpoint_text(runs: pd.DataFrame, endpoint: str) -> str:
    """What the endpoint is, with the rounds it reads (``mean test accuracy of the last 5
    evaluations (rounds 16-20 of 20)``)."""
    what = ENDPOINTS[endpoint][2]
    if runs.empty:
        return what
    if runs[["rounds", "eval_every"]].drop_duplicates().shape[0] > 1:  # rows in protocols
        return what + ", each row at its own last evaluations (its protocol's rounds)"
    rounds, k, every = (int(runs[c].max()) for c in ("rounds", "last_k", "eval_every"))
    last = rounds - (rounds % every) if rounds % every else rounds
    if endpoint == "accuracy_last_k":
        first = max(every, last - (k - 1) * every)
        return what.replace("the last k", f"the last {k}") + f", rounds {first}-{last} of {rounds}"
    return f"{what}, round {last} of {rounds}"


def family_markdown(outcomes: list[FamilyOutcome], secondary: list[FamilyOutcome],
                    table: pd.DataFrame, plan: SeedPlan, runs: pd.DataFrame) -> str:
    """One section per family and setting: the answers in words, then the table of its
    comparisons on the primary endpoint, then the secondary endpoints."""
    if not outcomes:
        return ""
    by_row = {(r["dataset"], r["alpha"], r["row"]): r for _, r in table.iterrows()}
    parts = []
    for o in outcomes:
        fam, (dataset, alpha) = o.family, o.setting
        col = ENDPOINTS[o.endpoint][0]
        head = (f"### {fam.paper}: `{fam.reference}` against its baselines ({dataset}, "
                f"Dirichlet {alpha:g}; family `{fam.name}`)")
        if fam.protocol:  # the paper protocol its rows run, and where its endpoint reads
            head += (f"\n\nProtocol `{fam.protocol}`: {fam.protocol_note}. Endpoint: "
                     + endpoint_text(runs[runs["row"].isin(fam.rows)], o.endpoint) + ".")
        status = ("" if o.complete else
                  f"\n\n*In progress: {o.looks_done} of {len(plan.looks)} looks have all "
                  "their seeds; rerun the sweep to continue.*")
        words = "\n".join(f"- {d.words(fam.reference)}{_tuning_note(fam.reference, d.baseline)}"
                          for d in o.decisions)
        lines = ["| row | regime | seeds | endpoint (mean ± 95 %) | Δ reference − row "
                 "[adjusted interval] | verdict | decided at | best? | training |",
                 "|---|---|---|---|---|---|---|---|---|"]
        marks = best_marks(o)
        for row in fam.rows:
            r = by_row.get((dataset, alpha, row))
            d = next((x for x in o.decisions if x.baseline == row), None)
            seeds = "—" if r is None else str(int(r["seeds"])) + (
                f" (+{int(r['failed'])} failed: {r['failures']})" if r["failed"] else "")
            value = "—" if r is None else half_width(r[f"{col}_mean"], r[f"{col}_low"],
                                                     r[f"{col}_high"], int(r[f"{col}_n"]),
                                                     ".4f", bool(r[f"{col}_resolved"]))
            state = "" if r is None else str(r.get("training", ""))
            regime_text = "" if r is None else str(r["hparams"])
            if d is None:
                lines.append(f"| **{row}** (reference) | {regime_text} | {seeds} | {value} | "
                             f"— | — | — | {marks.get(row, '')} | {state} |")
                continue
            c = d.comparison
            delta = "—" if c is None else c.text("+.4f").split(", " + c.verdict)[0]
            verdict = d.verdict + ("" if c is None else (
                c.tost_label() if c.verdict == "equivalent" else "") + c.fragile_text())
            lines.append(f"| {row} | {regime_text} | {seeds} | {value} | {delta} | "
                         f"{verdict} | {d.decided_at or '—'} | {marks.get(row, '')} | "
                         f"{state} |")
        sec = [x for x in secondary if x.family.name == fam.name and x.setting == o.setting]
        sec_text = ""
        if sec:
            sec_lines = ["| row | " + " | ".join(
                f"Δ {ENDPOINTS[x.endpoint][0]} (first {plan.looks[0]} seeds)" for x in sec)
                + " |", "|---|" + "---|" * len(sec)]
            for b in fam.baselines:
                cells = []
                for x in sec:
                    d = next(y for y in x.decisions if y.baseline == b)
                    c = d.comparison
                    cells.append(d.verdict if c is None else c.text("+.3f") + c.fragile_text())
                sec_lines.append(f"| {b} | " + " | ".join(cells) + " |")
            sec_text = ("\n\nSecondary endpoints (each tested once on the first look's seeds, "
                        "Holm over the family at 5 %; intervals cut to the range of a "
                        "difference of accuracies, [-1, 1]; `no resolution at n = ...` where "
                        "the interval or the detectable difference spans that range):\n\n"
                        + "\n".join(sec_lines))
        parts.append(f"{head}{status}\n\n{words}\n\n" + "\n".join(lines) + sec_text
                     + plan_line(o, plan))
    return "\n\n".join(parts)


PLANNED_DIFFERENCE = 0.02  # the difference the seed-planning line sizes a family for


def plan_line(outcome: FamilyOutcome, plan: SeedPlan) -> str:
    """For planning the next experiment, not this one: the seeds a paired t-test at this
    family's first Holm level would need to detect a PLANNED_DIFFERENCE with 80 % power, from
    the median spread of the family's paired differences (a pilot's estimate)."""
    sds = [float(np.std(d.comparison.differences, ddof=1)) for d in outcome.decisions
           if d.comparison is not None and d.comparison.n >= 2]
    if not sds:
        return ""
    sd = float(np.median(sds))
    level = plan.level_per_look / max(1, len(outcome.decisions))
    n = seeds_for(PLANNED_DIFFERENCE, sd, level)
    return ("" if n is None else
            f"\n\n*Planning a new experiment (not this one): with the median paired sd of this "
            f"family ({sd:.3f}) a {PLANNED_DIFFERENCE:g} difference needs about {n} seeds at its "
            f"first Holm level ({level:.2g}) for 80 % power; fix them as looks before it runs.*")


def _tuning_note(reference: str, baseline: str) -> str:
    """A warning when one side of a comparison was tuned by a study and the other was not."""
    if is_tuned(reference) == is_tuned(baseline):
        return ""
    side = "reference" if is_tuned(reference) else "baseline"
    return f" (**tuning differs**: only the {side} was tuned by a study)"


def best_marks(outcome: FamilyOutcome) -> dict[str, str]:
    """``best`` on the reference when it is better than every baseline, ``tied best (±δ)``
    when it is better than or equivalent to each with at least one equivalence; nothing else
    (a baseline is compared with the reference only, never with the other baselines)."""
    verdicts = [d.verdict for d in outcome.decisions]
    fam = outcome.family
    if verdicts and all(v == "better" for v in verdicts):
        return {fam.reference: "best"}
    if verdicts and all(v in ("better", "equivalent") for v in verdicts):
        return {fam.reference: f"tied best (±{fam.margin:g})"}
    return {}


def detectable_vs_reference(runs: pd.DataFrame, reference: str) -> dict[tuple[Any, ...], str]:
    """Per row: the smallest difference to the reference row of its setting that a paired t-test
    at 5 % detects with 80 % power at the row's seeds (from the observed paired spread of the
    primary endpoint); the exploratory table's resolution, not a test."""
    out: dict[tuple[Any, ...], str] = {}
    ok = runs[runs["status"] == "FINISHED"]
    refs = reference_rows(ok, reference)
    for (dataset, alpha), sub in ok.groupby(["dataset", "alpha"], sort=False):
        ref = refs.get((dataset, alpha))
        if ref is None:
            continue
        theirs = dict(zip(sub.loc[sub["row"] == ref, "seed"],
                          sub.loc[sub["row"] == ref, "accuracy_last_k"], strict=True))
        for row, g in sub.groupby("row", sort=False):
            if row == ref:
                out[(dataset, alpha, row)] = "reference"
                continue
            _, mine, ref_values = paired_seeds(dict(zip(g["seed"], g["accuracy_last_k"],
                                                        strict=True)), theirs)
            diffs = np.subtract(mine, ref_values)
            if len(diffs) < 2:
                continue
            d = detectable_difference(float(np.std(diffs, ddof=1)), len(diffs), 0.05)
            half = (DIFFERENCE_RANGE[1] - DIFFERENCE_RANGE[0]) / 2
            out[(dataset, alpha, row)] = ("" if not np.isfinite(d) else f"±{d:.3f}" if d < half
                                          else no_resolution(len(diffs)))
    return out


def forest_frame(outcomes: list[FamilyOutcome]) -> pd.DataFrame:
    """The forest plot's input: one line per comparison of every family (primary endpoint),
    with the interval a table shows (TOST's for an equivalent verdict, cut to [-1, 1]) and the
    family's equivalence margin."""
    columns = ["family", "setting", "row", "mean", "low", "high", "verdict", "reference", "n",
               "margin"]
    lines = []
    for o in outcomes:
        for d in o.decisions:
            c = d.comparison
            shown = None if c is None else c.shown
            lines.append({
                "family": f"{o.family.paper} ({o.family.name}), Dirichlet {o.setting[1]:g}",
                "setting": o.setting, "row": d.baseline,
                "mean": np.nan if shown is None else shown.mean,
                "low": np.nan if shown is None else shown.low,
                "high": np.nan if shown is None else shown.high,
                "verdict": d.verdict if c is not None else "not run",
                "reference": o.family.reference, "n": 0 if c is None else c.n,
                "margin": o.family.margin})
    return pd.DataFrame(lines, columns=columns)


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
    pretty = _formatted(table, detectable_vs_reference(runs, reference))
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


def write_all(out: Path, write: Callable[[Path], Any]) -> list[Path]:
    """Write every file of a report (``write(folder)``) into a temporary folder next to
    ``out``, then move each into ``out``: a failure (a full disk) leaves the previous report as
    it was, no half one, and its error names the file (``no space left on device writing
    report file <path>``). Returns the files, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    before: set[str] = set()
    try:
        try:
            write(stage)
        except BaseException as exc:
            if faults.is_disk_full(exc):
                written = sorted(stage.iterdir(), key=lambda p: p.stat().st_mtime)
                name = written[-1].name if written else "table.md"
                raise faults.no_space(f"report file {out / name}") from None
            raise
        names = sorted(p.name for p in stage.iterdir() if p.is_file())
        before.update(names)
        for name in names:
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [out / name for name in sorted(before)]


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
    text, _ = aggregate_section(chosen.drop(columns="_s"), reference, out, columns=columns)
    return "\n" + text + "\n"


def write_latex(outcomes: list[FamilyOutcome], table: pd.DataFrame, runs: pd.DataFrame,
                plan: SeedPlan, out: Path) -> list[Path]:
    """``families.tex``: a booktabs table per family and setting, or for a sweep without
    families an exploratory one per setting (``fedcore.pipeline.paper_tables``);
    ``statistics.md``: the checklist paragraph, with the seeds each row ran."""
    from fedcore.pipeline.latex import statistics_statement
    from fedcore.pipeline.paper_tables import families_tex

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


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (no half file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


FIGURES = (  # file, what it shows (the report's "Figures" section, in this order)
    ("convergence.png", "test accuracy per round, one panel per family and setting (mean over "
     "seeds, band: 95 % interval, the reference dashed black)"),
    ("forest.png", "each family's paired differences, reference − baseline, with their "
     "Holm-adjusted intervals coloured by verdict"),
    ("client_accuracy.png", "final local accuracy of every client, all seeds pooled, per row"),
    ("accuracy_vs_gb.png", "test accuracy against cumulative uplink GB"),
    ("accuracy_vs_epsilon.png", "accuracy against the privacy budget spent"),
    ("accuracy_vs_time.png", "test accuracy against simulated seconds (runs with a simulated "
     "clock: docs/how-to/stragglers.md)"),
)


def figures_markdown(folder: Path) -> str:
    """The "Figures" section: each figure of ``FIGURES`` written to ``folder``, linked by its
    file name (the HTML page embeds them) with what it shows."""
    lines = ["", "## Figures", ""]
    for name, words in FIGURES:
        if (folder / name).is_file():
            lines += [f"![{words}]({name})", "", f"`{name}`: {words}.", ""]
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


def counts_line(spec: SweepSpec, runs: pd.DataFrame, outcomes: list[FamilyOutcome]) -> str:
    """``123 cells planned: 98 finished, 1 diverged or failed, 20 not needed (decided at an
    earlier look), 4 not yet run``."""
    done = set(runs["config_hash"])
    finished = int((runs["status"] == "FINISHED").sum())
    failed = int((runs["status"] != "FINISHED").sum())
    open_rows = rows_to_run(outcomes)
    first = set(spec.seed_plan.at(0))
    planned = [c for c in spec.cells if spec.planned(c)]
    pending = [c for c in planned if c.config.config_hash() not in done]
    needed = [c for c in pending if c.config.seed in first or c.row in open_rows]
    skipped = len(pending) - len(needed)
    parts = [f"{finished} finished", f"{failed} diverged or failed (kept in their rows)"]
    if skipped:
        parts.append(f"{skipped} not needed (their comparisons were decided at an earlier look)")
    if needed:
        parts.append(f"{len(needed)} not yet run")
    return f"{len(planned)} cells planned: " + ", ".join(parts) + "."


def early_text(runs: pd.DataFrame) -> str:
    """A line on the runs a callback stopped early (on a validation metric: early stopping
    refuses test-set monitors; or a privacy budget), whose endpoint reads their own last
    rounds; "" for none."""
    early = runs[runs["stopped_early"].astype(bool)] if "stopped_early" in runs else runs[:0]
    if early.empty:
        return ""
    why = "; ".join(dict.fromkeys(early["stopped_early"]))[:300]
    return (f"**Stopped early**: {len(early)} run(s) ended before the horizon on a validation "
            f"metric or a privacy budget ({why}); their endpoint reads their own last "
            "evaluations.\n\n")


def plan_text(plan: SeedPlan) -> str:
    """The seed plan and the boundary in words."""
    if len(plan.looks) == 1:
        return (f"{plan.looks[0]} seeds ({', '.join(map(str, plan.seeds))}), one look; each "
                "family's verdicts at 5 % family-wise (Holm)")
    return (f"looks at {', '.join(map(str, plan.looks))} seeds (seeds {plan.seeds[0]}-"
            f"{plan.seeds[-1]}); at each look Holm over the family at "
            f"{plan.level_per_look:.3g} = 5 % / {len(plan.looks)} looks, so any false "
            "better/worse has at most 5 % chance per family over all looks")


def description(header: str, outcomes: list[FamilyOutcome]) -> str:
    """The parent run's description: the counts and each family's answers in words."""
    lines = [header.split("\n\n")[0], header.split("\n\n")[1]]
    for o in outcomes:
        lines.append(f"**{o.family.paper}** ({o.setting[0]}, Dirichlet {o.setting[1]:g}):")
        lines.append("\n".join(f"- {d.words(o.family.reference)}" for d in o.decisions))
    lines.append("Every row, the plots and how to read them: artifacts `report/table.md` and "
                 "`report/*.png`.")
    return "\n\n".join(lines) + "\n"


def convergence_panels(runs: pd.DataFrame, families: tuple[Family, ...]
                       ) -> list[tuple[str, Any, str | None, list[str]]]:
    """(title, alpha, reference row or None, rows) per convergence panel: one per family and
    setting with runs, then the rows in no family by method group, only where there are runs."""
    from fedcore.tracking.comparison_plots import family_of

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


def explanation(reference: str, spec: SweepSpec) -> str:
    """How to read the report: families, verdicts, intervals, the exploratory table, regimes."""
    studies = "; ".join(f"`{m}`: study `{t}`" for m, t in spec.tuning.items())
    return (
        "**How to read this report.** A *family* is one paper's method (the reference) against "
        "that paper's own baselines, declared in the sweep file with its primary endpoint "
        "before anything ran. Each comparison pairs the two rows on the same seeds (a seed fixes "
        "partition, initial model, client sampling and batch order for every method) and tests "
        "the per-seed differences, reference − row: `better`/`worse` when the two-sided paired "
        "t-test rejects no difference, `equivalent` when two one-sided tests put the difference "
        "inside ±margin, `undecided` otherwise (with the smallest difference it could detect). "
        "Holm's step-down runs within a family only, at 5 % divided by the number of looks; the "
        "Δ interval is at the level Holm gave that comparison, so it excludes 0 exactly when the "
        "verdict is better or worse; an `equivalent` verdict shows its TOST (1 − 2α) interval, "
        "inside ±margin. Every interval is cut to its metric's range (a difference of "
        "accuracies to [-1, 1], an accuracy to [0, 1]); `no resolution at n = 3` where the "
        "interval or the detectable difference spans it. A verdict is `fragile` when its "
        "p-value lies within 10 % of its threshold. `training`: `climbing` when the mean change "
        "of test accuracy between the last two windows of k evaluations is at least "
        f"{MIN_CHANGE:g} and above {NOISE_SE:g} standard errors of its seed-to-seed spread, "
        "else `plateaued`. Differences equal on every seed get the exact sign-flip "
        "p-value (2/2^n), never 0. `best?`: only the reference, and only when its family's "
        "tests say it beats (or ties within ±margin) every baseline. A failed or diverged seed "
        "stays in its row and blocks the verdicts that need it. "
        "The exploratory table: mean over finished seeds ± half the 95 % Student-t interval; "
        "`detectable Δ vs ref`: the smallest difference to the "
        f"`{reference}` row a paired t-test at 5 % would detect with 80 % power at this n (a "
        "resolution, not a test); rounds to target: the median over seeds with seeds that "
        "never reached the target censored at the horizon, and how many reached it. Accuracy, "
        "worst-10 % and rounds to target are discrete (steps of one test sample, one client, "
        "one round), so ties between seeds are real. "
        "`regime`: `paper` only when the method's hyperparameters, local optimiser, data and "
        "horizon (rounds, clients, participation, model) are all its paper's; otherwise each "
        "part is named: `tuned` (a study chose it), `set` (by hand), `default` (fedcore's default "
        "experiment), `(horizon other)` (paper hyperparameters at another horizon). A value "
        "every row shares (the sweep's `set:`) labels no row."
        + (f" Tuned rows: {studies}." if studies else "")
        + " Personal columns: the personal models of personalised methods (blank for the "
        "others)."
    )


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
