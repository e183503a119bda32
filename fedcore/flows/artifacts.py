"""The Prefect artifact of a sweep or study flow run: links to the MLflow parent run and
training view first, the result table, then a link to each child run."""

from __future__ import annotations

import re
from typing import Any

from fedcore.tracking import TrackingSettings, mlflow_client
from fedcore.tracking.links import experiment_url, run_url


def artifact_key(name: str) -> str:
    """Prefect artifact keys allow lower-case letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "fedcore"


def links_markdown(
    settings: TrackingSettings, parent_run_id: str, rows: list[dict[str, Any]], label: str
) -> str:
    """Links to the MLflow parent run, the experiment's training view and each child run."""
    exp_id = mlflow_client(settings).get_run(parent_run_id).info.experiment_id
    lines = [
        f"**MLflow**: [parent run]({run_url(settings, exp_id, parent_run_id)}) · "
        f"[experiment (training view)]({experiment_url(settings, exp_id)})",
        "",
    ]
    children = [r for r in rows if r.get("run_id")]
    if children:
        lines.append("Child runs:")
        lines += [f"- [{r.get(label, r['run_id'][:8])}]({run_url(settings, exp_id, r['run_id'])})"
                  for r in children]
    return "\n".join(lines)


def publish_table(
    key: str,
    table: str,
    settings: TrackingSettings,
    parent_run_id: str,
    rows: list[dict[str, Any]],
    label: str = "cell",
) -> str:
    """Create the flow run's markdown artifact (MLflow links, the table, the child runs'
    links); returns its Markdown."""
    from prefect.artifacts import create_markdown_artifact

    head, _, children = links_markdown(settings, parent_run_id, rows, label).partition("\n\n")
    markdown = head + "\n\n" + table + ("\n\n" + children if children else "")
    create_markdown_artifact(
        markdown=markdown, key=artifact_key(key), description="results and MLflow runs"
    )
    return markdown
