"""Comparison report of a sweep: its finished runs from MLflow, as tables and plots."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedcore import code_digest
from fedcore.pipeline.comparison import (
    RowTest,
    best_marks,
    forest_frame,
    half_width,
    reference_rows,
    versus_reference,
    with_intervals,
)
from fedcore.pipeline.hparams import regime
from fedcore.pipeline.sweep import SweepSpec
from fedcore.tracking.mlflow_tracker import get_experiment_id, mlflow_client
from fedcore.tracking.parents import html_page, log_variant_table, set_description
from fedcore.tracking.plots import _pyplot
from fedcore.tracking.provenance import (
    CODE_DIGEST_TAG,
    COMMIT_TAG,
    DIRTY_TAG,
    code_label,
    current_code_label,
)
from fedcore.tracking.runner import finished_run, other_code_runs
from fedcore.tracking.settings import TrackingSettings, load_settings

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

GROUP = ["row", "method", "hparams", "tuning", "dataset", "alpha"]
DEFAULT_REFERENCE = "fedavg"
COLUMNS = [
    ("accuracy", "final/accuracy", "final accuracy"),
    ("worst10", "final/accuracy_worst10", "worst-10 %"),
    ("client_std", "final/accuracy_std", "client accuracy std"),
    ("jain", "clients/jain_index", "Jain"),
    ("auc", "auc/accuracy", "AUC"),
    ("rounds_to_target", "rounds_to_target", "rounds to target"),
    ("gb_sent", "comm/bytes_up_total", "GB sent"),
    # personalised methods (Ditto): their personal models; blank for every other method
    ("personal_accuracy", "final/personal_accuracy_mean", "personal accuracy"),
    ("personal_worst10", "final/personal_accuracy_worst10", "personal worst-10 %"),
    ("personal_std", "final/personal_accuracy_std", "personal std"),
    ("personal_jain", "final/personal_jain", "personal Jain"),
]
PERSONAL = {key for key, metric, _ in COLUMNS if metric.startswith("final/personal_")}


@dataclass
class Report:
    """The runs of a sweep (one row per cell) and the per-group summary table."""

    runs: pd.DataFrame
    table: pd.DataFrame
    files: list[Path]
    tests: list[RowTest] = field(default_factory=list)


def sweep_runs(
    spec: SweepSpec, settings: TrackingSettings | None = None, any_code: bool = False
) -> pd.DataFrame:
    """The latest FINISHED run made by this code (by any code with ``any_code``) of every cell
    of ``spec`` (cells without one are left out), with the code that made it (``commit``,
    ``dirty``, ``code_digest``).

    Rows keep the sweep's cell order within each (dataset, alpha).
    """
    settings = settings or load_settings()
    cells = {c.config.config_hash(): c for c in spec.cells}
    varied = sorted({k for c in spec.cells for k in c.overrides} - {"seed", "method"} -
                    {"dataset.name", "dataset.alpha"})
    rows: list[dict[str, Any]] = []
    for h, cell in cells.items():
        cfg = cell.config
        run = finished_run(h, settings, any_code=any_code, code=code_digest.of_config(cfg))
        if run is None:
            continue
        mode = regime(cfg.resolved())
        row = {
            "run_id": run.info.run_id,
            "config_hash": h,
            "row": row_label(cell.overrides, cfg.method.name, mode.method, mode.local),
            "method": cfg.method.name,
            "hparams": mode.label,
            "tuning": spec.tuning_text(cfg.method.name) if "tuned" in (mode.method, mode.local)
            else "",
            "dataset": cfg.dataset.name,
            "alpha": cfg.dataset.alpha,
            "seed": cfg.seed,
            "compressor": cfg.method.compression.get("compressor", "none"),
            **{f"grid:{k}": cell.overrides.get(k) for k in varied},
            "commit": run.data.tags.get(COMMIT_TAG, ""),
            "dirty": run.data.tags.get(DIRTY_TAG, ""),
            "code_digest": run.data.tags.get(CODE_DIGEST_TAG, ""),
            "code": code_label(run.data.tags),
        }
        for key, metric, _ in COLUMNS:
            row[key] = run.data.metrics.get(metric, np.nan)
        row["gb_sent"] = row["gb_sent"] / 1e9
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values(["dataset", "alpha"], kind="stable").reset_index(drop=True)
    return frame


def row_label(overrides: dict[str, Any], method: str, method_part: str, local_part: str) -> str:
    """What a report row compares: the method, ``(tuned)`` when its method or local part is,
    and the values the cell sets beyond method, seed and data (``craft (tuned) server_lr=0.5``)."""
    skip = {"method", "seed", "dataset.name", "dataset.alpha"}
    extra = " ".join(f"{k.rsplit('.', 1)[-1]}={v:.4g}" if isinstance(v, float) else
                     f"{k.rsplit('.', 1)[-1]}={v}" for k, v in overrides.items() if k not in skip)
    tuned = " (tuned)" if "tuned" in (method_part, local_part) else ""
    return f"{method}{tuned}" + (f" {extra}" if extra else "")


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per row x dataset x alpha (x varied keys): seeds, and per column the mean over seeds
    with its 95 % t-interval (``<key>_mean``, ``_low``, ``_high``, ``_n``)."""
    table = with_intervals(runs, [key for key, _, _ in COLUMNS], _group_keys(runs))
    reached = runs.groupby(_group_keys(runs), sort=False, dropna=False)["rounds_to_target"]
    table["reached_target"] = list(reached.count())
    return table


def _group_keys(frame: pd.DataFrame) -> list[str]:
    """row, method, regime, dataset, alpha and any other key the sweep varies (seeds are the
    repetitions within a group)."""
    return [c for c in frame.columns if c in GROUP or c.startswith("grid:")]


def _verdict_columns(table: pd.DataFrame, tests: list[RowTest], reference: dict[Any, str],
                     marks: dict[tuple[str, float, str], str]) -> dict[str, list[str]]:
    by = {(t.metric, t.dataset, t.alpha, t.row): t for t in tests}
    cols: dict[str, list[str]] = {"best?": [], "Δ accuracy vs ref": [],
                                  "Δ worst-10 % vs ref": []}
    for ds, alpha, row in zip(table["dataset"], table["alpha"], table["row"], strict=True):
        cols["best?"].append(marks.get((ds, alpha, row), ""))
        for metric, name in (("accuracy", "Δ accuracy vs ref"),
                             ("worst10", "Δ worst-10 % vs ref")):
            t = by.get((metric, ds, alpha, row))
            is_ref = reference.get((ds, alpha)) == row
            cols[name].append("reference" if is_ref else t.comparison.text("+.3f") if t else "—")
    return cols


def _formatted(table: pd.DataFrame, tests: list[RowTest] | None = None,
               reference: dict[Any, str] | None = None,
               marks: dict[tuple[str, float, str], str] | None = None) -> pd.DataFrame:
    keys = [k for k in _group_keys(table) if k != "method"]
    out = table[keys].copy()
    for key in keys:  # a key only some grids vary is blank where a cell does not set it
        if key.startswith("grid:"):
            out[key] = ["" if v is None or (isinstance(v, float) and np.isnan(v)) else v
                        for v in out[key]]
    out = out.drop(columns=[k for k in keys if k.startswith("grid:")])
    out = out.rename(columns={"hparams": "regime"})
    out["seeds"] = table["seeds"]
    verdicts = _verdict_columns(table, tests or [], reference or {}, marks or {})
    out["best?"] = verdicts["best?"]
    fmt = {"rounds_to_target": ".1f", "gb_sent": ".4g"}
    for key, _, label in COLUMNS:
        f = fmt.get(key, ".4f")
        out[label] = [
            "" if key in PERSONAL and np.isnan(m) else half_width(m, lo, hi, n, f)
            for m, lo, hi, n in zip(table[f"{key}_mean"], table[f"{key}_low"],
                                    table[f"{key}_high"], table[f"{key}_n"], strict=True)
        ]
        if key == "accuracy":
            out["Δ accuracy vs ref"] = verdicts["Δ accuracy vs ref"]
        if key == "worst10":
            out["Δ worst-10 % vs ref"] = verdicts["Δ worst-10 % vs ref"]
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


def client_accuracy_png(runs: pd.DataFrame, finals: dict[str, np.ndarray], path: Path) -> None:
    """Final per-client local accuracy of every method (all seeds pooled), per alpha."""
    plt = _pyplot()
    alphas = sorted(runs["alpha"].unique())
    fig, axes = plt.subplots(len(alphas), 1, figsize=(max(6, 0.5 * runs["method"].nunique() + 3),
                                                      3.5 * len(alphas)), squeeze=False)
    for ax, alpha in zip(axes[:, 0], alphas, strict=True):
        sub = runs[runs["alpha"] == alpha]
        labels, data = [], []
        for row, group in sub.groupby("row", sort=False):
            labels.append(str(row))
            data.append(np.concatenate([finals[r] for r in group["run_id"]]))
        ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=60, ha="right", fontsize=7)
        ax.set(ylabel="final local test accuracy per client", ylim=(0, 1),
               title=f"Dirichlet alpha = {alpha}: clients of every seed pooled")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def accuracy_vs_gb_png(
    runs: pd.DataFrame, acc: dict[str, pd.Series], sent: dict[str, pd.Series], path: Path
) -> None:
    """Test accuracy against cumulative uplink GB for compressed methods and their baselines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (row, alpha), group in runs.groupby(["row", "alpha"], sort=False):
        curves = [pd.concat([sent[r] / 1e9, acc[r]], axis=1, join="inner")
                  for r in group["run_id"]]
        mean = sum(c.to_numpy() for c in curves) / len(curves)
        style = "-" if (group["compressor"] != "none").any() else ":"
        ax.plot(mean[:, 0], mean[:, 1], style, label=f"{row} (alpha {alpha})")
    ax.set(xscale="log", xlabel="uplink GB (cumulative)", ylabel="test accuracy",
           title="Accuracy vs communication (dotted: uncompressed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _final_client_accuracy(client: MlflowClient, run_id: str, tmp: Path) -> np.ndarray:
    local = client.download_artifacts(run_id, "per_client.parquet", str(tmp))
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
    reference: str = DEFAULT_REFERENCE,
) -> Report:
    """Write table.{md,html,csv}, runs.csv and the plots to ``out_dir``; log them to the parent.

    Rows are runs made by this code; ``any_code`` tables each cell's newest run of any code.
    ``reference``: the row (label, or a method with one row per setting) every row is tested
    against, at the same dataset and alpha.
    """
    from fedcore.tracking.comparison_plots import family_convergence_png, forest_png

    settings = settings or load_settings()
    client = mlflow_client(settings)
    runs = sweep_runs(spec, settings, any_code)
    if runs.empty:
        other = "" if any_code else _other_code_hint(spec, settings)
        by = "" if any_code else "made by this code "
        raise LookupError(f"sweep {spec.name!r}: no FINISHED run {by}of any of its "
                          f"{len(spec.cells)} cells{other}; run the sweep first")
    refs = reference_rows(runs, reference)
    if not refs:
        rows = ", ".join(dict.fromkeys(runs["row"]))
        raise LookupError(f"reference {reference!r} matches no row of sweep {spec.name!r} "
                          f"(a method with one row per setting, or a row label); rows: {rows}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = summary_table(runs)
    tests = versus_reference(runs, reference)
    pretty = _formatted(table, tests, refs, best_marks(runs))
    files = [out / "table.md", out / "table.html", out / "table.csv", out / "runs.csv"]
    missing = len(spec.cells) - len(runs)
    header = (f"# Sweep `{spec.name}`: {len(runs)} finished runs of {len(spec.cells)} cells"
              + (f" ({missing} missing)" if missing else "") + "\n\n"
              + code_header(runs, any_code) + explanation(reference, refs, spec) + "\n\n")
    files[0].write_text(header + markdown_table(pretty) + "\n")
    files[1].write_text(html_page(pretty.to_html(index=False, border=0), f"Sweep {spec.name}"))
    table.to_csv(files[2], index=False)
    runs.drop(columns="code").to_csv(files[3], index=False)
    ids = list(runs["run_id"])
    acc = _histories(client, ids, "test/accuracy")
    shown = runs.assign(is_reference=[refs.get((d, a)) == r for d, a, r in
                                      zip(runs["dataset"], runs["alpha"], runs["row"],
                                          strict=True)])
    family_convergence_png(shown, acc, out / "convergence.png")
    forest_png(forest_frame(tests, FOREST_LABELS), out / "forest.png")
    with tempfile.TemporaryDirectory() as tmp:
        finals = {r: _final_client_accuracy(client, r, Path(tmp) / r) for r in ids}
    client_accuracy_png(runs, finals, out / "client_accuracy.png")
    files += [out / "convergence.png", out / "forest.png", out / "client_accuracy.png"]
    compressed = runs["compressor"] != "none"
    if compressed.any():
        baselines = runs["method"].isin(["fedavg"]) & runs["alpha"].isin(
            runs.loc[compressed, "alpha"])
        shown = runs[compressed | baselines]
        sent = _histories(client, list(shown["run_id"]), "comm/bytes_up_total")
        accuracy_vs_gb_png(shown, acc, sent, out / "accuracy_vs_gb.png")
        files.append(out / "accuracy_vs_gb.png")
    if parent_run_id is not None:
        for f in files:
            client.log_artifact(parent_run_id, str(f), "report")
        log_variant_table(client, parent_run_id, table)
        brief = pretty[[c for c in DESCRIPTION_COLUMNS if c in pretty.columns]]
        set_description(client, parent_run_id, (
            header.split("\n\n")[0] + "\n\nThe main columns (every column, the plots and how "
            "to read them: artifacts `report/table.md` and `report/*.png`):\n\n"
            + markdown_table(brief) + "\n"))
    return Report(runs, table, files, tests)


# the run description holds at most 8,000 characters in MLflow: the columns a comparison needs
DESCRIPTION_COLUMNS = ["row", "alpha", "seeds", "best?", "final accuracy", "Δ accuracy vs ref"]


FOREST_LABELS = {"accuracy": "final test accuracy − reference's",
                 "worst10": "worst-10 % client accuracy − reference's"}


def explanation(reference: str, refs: dict[Any, str], spec: SweepSpec) -> str:
    """How to read the table: intervals, the tests, the verdicts and the regime column."""
    ref_rows = ", ".join(sorted(set(refs.values()))) or f"none (no row {reference!r})"
    studies = "; ".join(f"`{m}`: study `{t}`" for m, t in spec.tuning.items())
    return (
        "Each cell: mean over seeds ± half the 95 % Student-t interval (`(1 seed)`: no "
        "interval); `—`: no seed reached the target. "
        f"`Δ … vs ref`: the paired difference to the reference row ({ref_rows}) at the same "
        "dataset and alpha, on the seeds both have (a seed fixes partition, initial model, "
        "client sampling and batch order for every method), with its 95 % interval, the paired "
        "t-test's p-value Holm-adjusted over the rows of this table, and the verdict at 5 %: "
        "better, worse or indistinguishable (then `~N seeds`: the seeds one paired t-test at 5 % "
        "would need for 80 % power if the observed difference were real; more under Holm). "
        "Intervals are per comparison, verdicts Holm-adjusted. A t-test because rank "
        "tests cannot reach 5 % with 3-5 seeds. `best?`: `best` is the highest mean final "
        "accuracy of its setting, `≈ best` a row the same test cannot tell from it. "
        "`regime`: `paper` only when the method's hyperparameters, the local optimiser and the "
        "data setting are all the paper's; otherwise each part is named (`default`: fedcore's "
        "default experiment; `tuned`: changed by a study or by hand)."
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
