"""What a sweep's or study's parent run records besides its children: the YAML it ran with,
the overrides, summary metrics, a results table as the run's description, and the per-variant
summary as an MLflow table (``variants.json``, shown by the UI's artifact view)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.tracking.provenance import provenance_tags

if TYPE_CHECKING:
    import pandas as pd
    from mlflow.tracking import MlflowClient

NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI
NOTE_LIMIT = 8000  # MLflow's limit on a tag value; it truncates a longer one with a warning


def log_source(client: MlflowClient, run_id: str, yaml_path: str | Path | None,
               overrides: list[str], artifact_name: str) -> None:
    """Provenance tags, the sweep/study file as artifact ``artifact_name`` and the overrides."""
    from mlflow.entities import RunTag

    tags = provenance_tags()
    tags["fedcore.overrides"] = " ".join(overrides)[:5000]
    if yaml_path is not None:
        tags["fedcore.source_file"] = str(Path(yaml_path).resolve())
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    if yaml_path is not None and Path(yaml_path).is_file():
        text = Path(yaml_path).read_text()
        if overrides:
            text += "\n# overrides: " + " ".join(overrides) + "\n"
        client.log_text(run_id, text, artifact_name)


SPACER = "&emsp;"  # an empty-looking column between two of a description table's columns


def set_description(client: MlflowClient, run_id: str, markdown: str) -> None:
    """Set the run's description (its Markdown tables spaced by ``spaced_tables``); one
    longer than MLflow keeps is cut after its last whole line that fits, says so, and is logged
    in full as the artifact ``description.md``."""
    markdown = spaced_tables(markdown)
    if len(markdown) <= NOTE_LIMIT:
        client.set_tag(run_id, NOTE_TAG, markdown)
        return
    client.log_text(run_id, markdown, "description.md")
    lines = markdown.splitlines()
    tail = "\n\n(cut to MLflow's {limit:,} characters: {n} of {total} lines; in full: artifact " \
        "description.md)"
    kept: list[str] = []
    size = len(tail) + 20
    for line in lines:
        if size + len(line) + 1 > NOTE_LIMIT:
            break
        kept.append(line)
        size += len(line) + 1
    note = "\n".join(kept) + tail.format(limit=NOTE_LIMIT, n=len(kept), total=len(lines))
    client.set_tag(run_id, NOTE_TAG, note)


def spaced_tables(markdown: str) -> str:
    """``markdown`` with a narrow blank column between any two columns of its pipe tables.

    The MLflow UI draws a description's table cells without padding and strips any style from
    it, so adjacent values run together (``0.10003`` for alpha 0.1000 and 3 seeds); an em-space
    column keeps them apart. Cells keep their text (``| final accuracy |`` stays searchable).
    """
    out = []
    for line in markdown.split("\n"):
        stripped = line.strip()
        if len(stripped) > 1 and stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", stripped[1:-1])]
            rule = all(c and set(c) <= set("-:") for c in cells)
            gap = "---" if rule else SPACER
            line = "| " + f" | {gap} | ".join(cells) + " |"
        out.append(line)
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.4f}"
    return "" if value is None else str(value)


def markdown_rows(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A Markdown table of ``rows`` (missing values blank)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


SWEEP_COLUMNS = ["cell", "status", "final/accuracy", "final/accuracy_worst10", "auc/accuracy",
                 "run_id"]


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "sweep": {
        "cells/planned": "the sweep's cells that some look may run (the report's \"N cells "
                         "planned\"); the other cells/* metrics split it",
        "cells/<status>": "planned cells by what the last `fedcore sweep` did: finished (ran "
                          "now), skipped (finished before), failed, not_run (not needed at a "
                          "later look, or stopped)",
        "best/final_accuracy": "highest final/accuracy among the sweep's cells",
        "mean/final_accuracy": "mean final/accuracy of the sweep's cells",
    },
}


def sweep_summary(
    client: MlflowClient, run_id: str, name: str, rows: list[dict[str, Any]], planned: int
) -> str:
    """Cell counts and the best final accuracy as metrics; the cell table as description.

    ``planned``: the sweep's planned cells (``cells/planned``, the one cell count, the same as
    the report's); ``cells/finished``, ``skipped``, ``failed`` and ``not_run`` split it by what
    this invocation did with each (``rows``: one per cell it ran or skipped). Returns the
    Markdown description.
    """
    from mlflow.entities import Metric

    counts = {s: sum(r.get("status") == s for r in rows) for s in ("finished", "skipped",
                                                                     "failed")}
    counts["not_run"] = max(0, planned - sum(counts.values()))
    metrics = {"cells/planned": float(planned),
               **{f"cells/{s}": float(n) for s, n in counts.items()}}
    accs = [r["final/accuracy"] for r in rows if isinstance(r.get("final/accuracy"), float)]
    if accs:
        metrics["best/final_accuracy"] = max(accs)
        metrics["mean/final_accuracy"] = sum(accs) / len(accs)
    ts = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, ts, step)
                                      for k, v, step in _new_values(client, run_id, metrics)])
    words = {"finished": "finished now", "skipped": "finished before (skipped)",
             "failed": "failed", "not_run": "not run (not needed at a later look, or stopped)"}
    note = (f"### Sweep `{name}`: {planned} cells planned ("
            + ", ".join(f"{n} {words[s]}" for s, n in counts.items()) + ")\n\n"
            + markdown_rows(rows, SWEEP_COLUMNS)
            + "\n\n`fedcore report` replaces this table with the comparison report.")
    set_description(client, run_id, note)
    return note


def _new_values(client: MlflowClient, run_id: str, metrics: dict[str, float]
                ) -> list[tuple[str, float, int]]:
    """``(key, value, step)`` of the metrics a rerun of the sweep changes: each at the step after
    the key's last one, so that no (metric, step) is recorded twice; unchanged ones left out."""
    out = []
    for key, value in metrics.items():
        history = client.get_metric_history(run_id, key)
        last = max(history, key=lambda m: (m.step, m.timestamp), default=None)
        if last is None:
            out.append((key, value, 0))
        elif last.value != value:
            out.append((key, value, last.step + 1))
    return out


def html_page(body: str, title: str) -> str:
    """A complete HTML document with its charset declared (the tables hold "±" and "—")."""
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title>'
            "</head>\n<body>\n" + body + "\n</body></html>\n")



VARIANT_TABLE = "variants.json"  # the parent's per-variant summary (an MLflow table artifact)
VARIANT_KEYS = ["row", "dataset", "alpha"]  # what one variant is, in the report's table
ENDPOINT_LABELS = {"accuracy_last_k": "accuracy, mean of last k", "accuracy": "final accuracy",
                   "worst10": "worst-10 %"}  # the report's column names of the endpoints
LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"  # the tag that shows an artifact as a table


def variant_table(table: pd.DataFrame, metric: str = "accuracy_last_k",
                  label: str | None = None,
                  bounds: tuple[float, float] | None = (0.0, 1.0)) -> pd.DataFrame:
    """One row per variant of ``table`` (the report's summary: ``row``, ``dataset``, ``alpha``
    and ``<metric>_mean``, ``_low``, ``_high``, ``_n``; one line per row), ranked by ``metric``
    (the primary endpoint; its column named ``label``, default the report's), best mean first
    per dataset and alpha (variants without a value last); interval bounds cut to ``bounds``
    (the metric's range; None: not cut).

    The MLflow UI shows a logged table's first four columns, so these come first: ``variant``
    (the row; with its dataset and alpha when the table holds more than one setting), the mean
    of ``metric`` (``label``), its 95 % interval as text and ``n`` (seeds with a value); then
    ``dataset``, ``alpha`` and the interval's bounds as numbers. Values rounded to 4 places.

    Raises:
        KeyError: ``table`` lacks a column this needs (the message names them).
    """
    import pandas as pd

    stats = [f"{metric}_{s}" for s in ("mean", "low", "high", "n")]
    missing = [c for c in ["row", *stats] if c not in table.columns]
    if missing:
        raise KeyError(f"variant table: columns {missing} missing (has {list(table.columns)})")
    setting = [k for k in ("dataset", "alpha") if k in table.columns]
    variant = table["row"].astype(str)
    if setting and len(table[setting].drop_duplicates()) > 1:
        variant = variant + [" · " + " ".join(map(str, v)) for v in table[setting].itertuples(
            index=False)]
    label = label or ENDPOINT_LABELS.get(metric, metric)
    mean, low, high = (table[c].astype(float) for c in stats[:3])
    if bounds is not None:
        low, high = low.clip(*bounds), high.clip(*bounds)
    mean, low, high = mean.round(4), low.round(4), high.round(4)
    out = pd.DataFrame({
        "variant": variant,
        label: mean,
        "95 % interval": [f"[{lo:.4f}, {hi:.4f}]" if lo == lo and hi == hi else "—"
                          for lo, hi in zip(low, high, strict=True)],
        "n": table[stats[3]].astype(int),
        **{k: table[k] for k in setting},
        "95 % low": low,
        "95 % high": high,
    })
    out = out.sort_values([*setting, label], ascending=[True] * len(setting) + [False],
                          kind="stable", na_position="last")
    return out.reset_index(drop=True)


def log_variant_table(client: MlflowClient, run_id: str, table: pd.DataFrame,
                      metric: str = "accuracy_last_k") -> pd.DataFrame:
    """Write ``variant_table`` of ``table`` (ranked by ``metric``) to the run as
    ``variants.json``, replacing the one an earlier report wrote (``MlflowClient.log_table``
    appends to it: every rerun listed each row once more), shown as a table by the MLflow UI;
    returns it."""
    import json
    import tempfile

    frame = variant_table(table, metric)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / VARIANT_TABLE
        frame.to_json(path, orient="split", index=False)
        client.log_artifact(run_id, str(path))
    shown = json.loads(client.get_run(run_id).data.tags.get(LOGGED_ARTIFACTS, "[]"))
    entry = {"path": VARIANT_TABLE, "type": "table"}
    if entry not in shown:
        client.set_tag(run_id, LOGGED_ARTIFACTS, json.dumps([*shown, entry]))
    return frame
