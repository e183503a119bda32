"""Readable Prefect flow-run names (``flow_run_name``), like the MLflow parent runs':
``sweep-main-20261202-031500`` instead of Prefect's random adjective-animal pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedcore.tracking.names import parent_name


def _parameters() -> dict[str, Any]:
    from prefect.runtime import flow_run

    return dict(flow_run.parameters or {})


def _stem(value: Any, default: str) -> str:
    return Path(str(value)).stem if value else default


def sweep_run_name() -> str:
    """``sweep-<sweep name>-<UTC time>`` (the name in the sweep file, else its file name)."""
    path = _parameters().get("sweep_file")
    name = _stem(path, "sweep")
    try:
        from fedcore.core.config import read_yaml
        from fedcore.specs.sweep_file import sweep_name

        name = sweep_name(read_yaml(Path(str(path))).get("name"), Path(str(path)))
    except Exception:  # noqa: BLE001  (the flow itself reports a bad file)
        pass
    return parent_name("sweep", name)


def tune_run_name() -> str:
    """``tune-<study>-<UTC time>``."""
    return parent_name("tune", _stem(_parameters().get("study_file"), "study"))


def simulate_run_name() -> str:
    """``simulate-<config file or defaults>-<UTC time>``."""
    return parent_name("simulate", _stem(_parameters().get("config"), "defaults"))


def claims_run_name() -> str:
    """``claims-<claims file>-<UTC time>``."""
    return parent_name("claims", _stem(_parameters().get("claims_file"), "claims"))


def report_run_name() -> str:
    """``report-<sweep file>-<UTC time>``."""
    return parent_name("report", _stem(_parameters().get("sweep_file"), "sweep"))
