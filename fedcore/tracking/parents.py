"""What a sweep's or study's parent run records besides its children: the YAML it ran with,
the overrides, summary metrics, and a results table as the run's description."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.tracking.provenance import provenance_tags

if TYPE_CHECKING:
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


def set_description(client: MlflowClient, run_id: str, markdown: str) -> None:
    """The run's description; one longer than MLflow keeps is cut after its last whole line
    that fits, says so, and is logged in full as the artifact ``description.md``."""
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


def sweep_summary(
    client: MlflowClient, run_id: str, name: str, rows: list[dict[str, Any]]
) -> str:
    """Cell counts and the best final accuracy as metrics; the cell table as description.

    Returns the Markdown description.
    """
    from mlflow.entities import Metric

    counts = {s: sum(r.get("status") == s for r in rows) for s in ("finished", "skipped",
                                                                     "failed")}
    metrics = {f"cells/{s}": float(n) for s, n in counts.items()}
    accs = [r["final/accuracy"] for r in rows if isinstance(r.get("final/accuracy"), float)]
    if accs:
        metrics["best/final_accuracy"] = max(accs)
        metrics["mean/final_accuracy"] = sum(accs) / len(accs)
    ts = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, ts, step)
                                      for k, v, step in _new_values(client, run_id, metrics)])
    note = (f"### Sweep `{name}`: {len(rows)} cells ("
            + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")\n\n"
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

