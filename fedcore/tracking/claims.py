"""The claims report as one MLflow parent run: every experiment a child, the table its artifact."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fedcore.report.claims import markdown, tally
from fedcore.specs.claims import ClaimsSpec
from fedcore.stats.claims import ClaimRow, run_claims
from fedcore.tracking.mlflow_tracker import get_experiment_id, mlflow_client
from fedcore.tracking.names import parent_name
from fedcore.tracking.runner import run_tracked
from fedcore.tracking.settings import TrackingSettings, load_settings

if TYPE_CHECKING:
    from fedcore.core.config import ExperimentConfig
    from fedcore.core.round.simulation import Result


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "claims": {
        "holds/<claim id>": "1 when the claim holds (or the implementation check passes), else 0",
        "claims/seconds": "wall-clock seconds of the claims run",
    },
}


def run_claims_tracked(
    spec: ClaimsSpec,
    settings: TrackingSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, list[ClaimRow], float]:
    """Run ``spec`` under a parent run ``claims-<name>-<UTC time>``; returns (run id, rows,
    seconds).

    The parent gets the table as ``claims/table.md`` and as its description, one metric
    ``holds/<claim id>`` (1 or 0) per claim and ``claims/seconds``.
    """
    settings = settings or load_settings()
    client = mlflow_client(settings)
    parent = client.create_run(
        get_experiment_id(client, settings),
        run_name=parent_name("claims", spec.name),
        tags={"fedcore.role": "claims", "claims": spec.name,
              "claims.seeds": ",".join(map(str, spec.seeds))},
    ).info.run_id

    def simulate(cfg: ExperimentConfig) -> Result:
        return run_tracked(cfg, parent_run_id=parent, tags={"claims": spec.name},
                           settings=settings, resume=False)[1]

    start = time.perf_counter()
    try:
        rows = run_claims(spec, simulate, progress)
    except BaseException as exc:
        client.set_tag(parent, "failure_reason", f"{type(exc).__name__}: {exc}"[:5000])
        client.set_terminated(parent, getattr(exc, "run_status", "FAILED"))  # KILLED: a stop
        raise
    seconds = time.perf_counter() - start
    table = markdown(rows)
    note = (f"Claims `{spec.name}`: {tally(rows)} "
            f"(seeds {list(spec.seeds)}, {seconds:.0f} s).\n\n{table}\n")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.md"
        path.write_text(note)
        client.log_artifact(parent, str(path), "claims")
    client.set_tag(parent, "mlflow.note.content", note)
    for r in rows:
        client.log_metric(parent, f"holds/{r.id}", float(r.holds))
        client.set_tag(parent, f"verdict/{r.id}", r.verdict)
    client.log_metric(parent, "claims/seconds", seconds)
    client.set_terminated(parent, "FINISHED")
    return parent, rows, seconds
