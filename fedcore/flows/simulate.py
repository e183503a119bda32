"""Prefect flow ``simulate``: one experiment config, one MLflow run."""

from __future__ import annotations

from typing import Any

from prefect import flow

import fedcore.flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore.core.compose.configure import load_config
from fedcore.flows.run_names import simulate_run_name
from fedcore.tracking.runner import run_tracked


@flow(name="simulate", flow_run_name=simulate_run_name, log_prints=True)
def simulate(
    config: str | None = None, overrides: list[str] | None = None, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Run one simulation as one MLflow run.

    Args:
        config: experiment YAML; None = the defaults (configs/experiment.yaml).
        overrides: KEY=VALUE strings (dotted keys, YAML values), e.g. ``rounds=50``.
        parent_run_id: MLflow run to nest this run under; None = a top-level run.
    """
    cfg = load_config(config, overrides or [])
    run_id, result = run_tracked(cfg, parent_run_id=parent_run_id)
    print(f"run {run_id}: " + ", ".join(f"{k}={v:.4f}" for k, v in result.summary.items()))
    return {"run_id": run_id, **result.summary}
