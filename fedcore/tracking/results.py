"""A sweep's results from the MLflow store as one tidy pandas DataFrame (the Python API)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.core.config import config_dir, parse_overrides
from fedcore.specs.sweep import SweepSpec, load_sweep
from fedcore.tracking.settings import load_settings

if TYPE_CHECKING:
    import pandas as pd


def sweep_runs(
    sweep: str | Path | SweepSpec,
    overrides: list[str] | dict[str, Any] | None = None,
    tracking_uri: str | None = None,
    any_code: bool = False,
) -> pd.DataFrame:
    """One row per cell of ``sweep`` with a FINISHED run made by this code.

    Args:
        sweep: a sweep YAML path, a name in configs/sweeps (``"main"``) or a loaded spec.
        overrides: as given to ``fedcore sweep`` (``["rounds=2"]``), since they change the
            cells' config hashes.
        tracking_uri: the MLflow store (default: mlflow.yml / MLFLOW_TRACKING_URI).
        any_code: take each cell's newest FINISHED run made by any code.

    Returns:
        One row per cell with a run: run id, config hash, method, hparams regime, dataset,
        alpha, seed, the grid values the sweep varies (``grid:<key>``), the code that made it
        and the final metrics (accuracy, worst-10 %, client std, Jain, AUC, rounds to target,
        GB sent, personal ones); cells without a run are left out.
    """
    from fedcore.tracking.sweep_runs import sweep_runs as cell_runs

    if not isinstance(sweep, SweepSpec):
        path = Path(sweep)
        if not path.suffix and not path.exists():
            path = config_dir() / "sweeps" / f"{sweep}.yaml"
        over = parse_overrides(overrides) if isinstance(overrides, list) else overrides
        sweep = load_sweep(path, over)
    settings = load_settings()
    if tracking_uri is not None:
        settings = replace(settings, tracking_uri=tracking_uri)
    return cell_runs(sweep, settings, any_code=any_code)
