"""Prefect flow ``report``: a sweep's comparison table and plots, from its MLflow runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

import fedcore.flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore.core.config import parse_overrides, project_root
from fedcore.flows.run_names import report_run_name
from fedcore.specs.sweep import load_sweep
from fedcore.tracking.report import build_report
from fedcore.tracking.sweep_runs import sweep_parent_run


@flow(name="report", flow_run_name=report_run_name, log_prints=True)
def report(
    sweep_file: str, overrides: list[str] | None = None, out_dir: str | None = None,
    any_code: bool = False, reference: str | None = None,
) -> dict[str, Any]:
    """Write SWEEP_FILE's report to OUT_DIR (default reports/<sweep>) and its parent MLflow run.

    Args:
        sweep_file: the sweep YAML whose runs are compared.
        overrides: KEY=VALUE strings, the overrides the sweep was run with.
        out_dir: output folder; None = reports/<sweep name> in the project.
        any_code: table each cell's newest FINISHED run of any code, not only this code's.
        reference: the row every row is tested against (a method or a row label); None =
            fedavg, else the sweep's first row.
    """
    spec = load_sweep(sweep_file, parse_overrides(overrides or []))
    out = Path(out_dir) if out_dir else project_root() / "reports" / spec.name
    result = build_report(spec, out, parent_run_id=sweep_parent_run(spec),
                          any_code=any_code, reference=reference)
    print(f"report of sweep {spec.name!r}: {len(result.runs)} runs -> {out}")
    return {"out_dir": str(out), "runs": len(result.runs), "files": [str(f) for f in result.files]}
