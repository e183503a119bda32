"""Prefect flow ``sweep``: one task per grid cell under one parent MLflow run."""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

import flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore.config import build_config, parse_overrides
from fedcore.sweep import SweepSpec, load_sweep
from fedcore.tracking import get_experiment_id, load_settings, mlflow_client
from fedcore.tracking.runner import finished_run, run_tracked


def _retry_unless_diverged(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failed cell once, but not a divergence (it would diverge again)."""
    try:
        state.result()
    except FloatingPointError:
        return False
    except Exception:  # noqa: BLE001  (any other failure may be transient)
        return True
    return True


@task(
    name="simulate-cell",
    retries=1,
    retry_delay_seconds=1,
    retry_condition_fn=_retry_unless_diverged,
    tags=["fedcore-sim"],
)
def simulate_cell(resolved: dict[str, Any], parent_run_id: str, sweep: str) -> dict[str, Any]:
    """Simulate one cell (its resolved config) as a child run of the sweep."""
    cfg = build_config(resolved)
    done = finished_run(cfg.config_hash())
    if done is not None:
        return {"run_id": done.info.run_id, "status": "skipped", **done.data.metrics}
    run_id, result = run_tracked(cfg, parent_run_id=parent_run_id, tags={"sweep": sweep})
    return {"run_id": run_id, "status": "finished", **result.summary}


def parent_run(spec: SweepSpec) -> str:
    """Get or create the sweep's parent run (one per sweep name and grid)."""
    settings = load_settings()
    client = mlflow_client(settings)
    exp_id = get_experiment_id(client, settings)
    found = client.search_runs(
        [exp_id], filter_string=f"tags.sweep_hash = '{spec.sweep_hash}'", max_results=1
    )
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        return run_id
    run = client.create_run(
        exp_id,
        run_name=f"sweep-{spec.name}",
        tags={"sweep": spec.name, "sweep_hash": spec.sweep_hash, "fedcore.role": "sweep"},
    )
    client.log_param(run.info.run_id, "cells", len(spec.cells))
    return run.info.run_id


@flow(name="sweep", log_prints=True)
def sweep(
    sweep_file: str, overrides: list[str] | None = None, max_workers: int = 1
) -> list[dict[str, Any]]:
    """Run every cell of SWEEP_FILE; cells with a FINISHED run of the same config are skipped."""
    spec = load_sweep(sweep_file, parse_overrides(overrides or []))
    parent = parent_run(spec)
    rows: list[dict[str, Any]] = []
    with ThreadPoolTaskRunner(max_workers=max_workers) as runner:
        futures = [
            (
                cell,
                runner.submit(
                    simulate_cell,
                    {
                        "resolved": cell.config.resolved(),
                        "parent_run_id": parent,
                        "sweep": spec.name,
                    },
                ),
            )
            for cell in spec.cells
        ]
        for cell, future in futures:
            state = future.wait() or future.state
            if state.is_completed():
                rows.append({"cell": cell.label, **future.result()})
            else:
                rows.append(
                    {
                        "cell": cell.label,
                        "status": "failed",
                        "error": str(state.message or state.name),
                    }
                )
            print(f"[{rows[-1]['status']}] {cell.label}")
    client = mlflow_client(load_settings())
    failed = sum(r["status"] == "failed" for r in rows)
    client.set_terminated(parent, "FAILED" if failed else "FINISHED")
    return rows
