"""A sweep's runs from the MLflow store: each cell's latest run made by this code (or any code),
as one tidy frame, with the histories, simulated clocks and per-client tables its report
reads."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedcore.core.round import code_digest
from fedcore.report.summary import COLUMNS
from fedcore.specs.hparams import row_regime
from fedcore.specs.rows import is_tuned
from fedcore.specs.sweep import SweepSpec
from fedcore.stats.comparison import canonical
from fedcore.tracking.mlflow_tracker import CONVERGED_TAG, get_experiment_id, mlflow_client
from fedcore.tracking.provenance import CODE_DIGEST_TAG, COMMIT_TAG, DIRTY_TAG, code_label
from fedcore.tracking.run_store import MlflowRunStore
from fedcore.tracking.runner import finished_run, other_code_runs, runs_with_hash
from fedcore.tracking.settings import TrackingSettings, load_settings

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

EPSILON_METRIC = "privacy/epsilon"
DELTA_PARAM = "dp.delta"
TIME_METRIC = "time/simulated_s"


def finished_by_cell(spec: SweepSpec, settings: TrackingSettings) -> dict[tuple[str, str], Run]:
    """The newest FINISHED run of each (config hash, code digest) among ``spec``'s cells' code
    digests: one paged search per digest (a sweep of built-in methods has one), where asking
    cell by cell took a search each."""
    found: dict[tuple[str, str], Run] = {}
    store = MlflowRunStore(settings)
    for code in {code_digest.of_config(c.config) for c in spec.cells}:
        for run in store.finished_of_code(code):  # newest first: the first one of a hash wins
            found.setdefault((run.data.tags.get("config_hash", ""), code), run)
    return found


def sweep_runs(
    spec: SweepSpec, settings: TrackingSettings | None = None, any_code: bool = False
) -> pd.DataFrame:
    """The latest FINISHED run made by this code (by any code with ``any_code``) of every cell of
    ``spec``, else its latest FAILED run (``status`` FAILED, ``failure`` its reason: a diverged
    seed stays in its row); cells with neither are left out. With the code that made each run
    (``commit``, ``dirty``, ``code_digest``). Rows keep the sweep's cell order within each
    (dataset, alpha).
    """
    settings = settings or load_settings()
    varied = sorted({k for c in spec.cells for k in c.overrides} - {"seed", "method"} -
                    {"dataset.name", "dataset.alpha"})
    rows: list[dict[str, Any]] = []
    known = None if any_code else finished_by_cell(spec, settings)  # any code: cell by cell
    for cell in spec.cells:
        cfg = cell.config
        h = cfg.config_hash()
        code = None if any_code else code_digest.of_config(cfg)
        run = (known.get((h, code)) if known is not None and code is not None
               else finished_run(h, settings, any_code=True))
        status, failure = "FINISHED", ""
        if run is None:
            failed = runs_with_hash(h, "= 'FAILED'", 1, settings, code=code)
            if not failed:
                continue
            run, status = failed[0], "FAILED"
            failure = _failure_text(run.data.tags.get("failure_reason", "failed"))
        mode = row_regime(cfg.resolved(), cell.row, cell.overrides)  # a study's parts: tuned
        tuned = is_tuned(cell.row)
        row = {
            "run_id": run.info.run_id,
            "artifact_uri": run.info.artifact_uri,
            "config_hash": h,
            "row": cell.row,
            "method": cfg.method.name,
            "hparams": mode.label,
            "tuning": spec.tuning_text(cfg.method.name) if tuned else "",
            "dataset": cfg.dataset.name,
            "alpha": cfg.dataset.alpha,
            "seed": cfg.seed,
            "status": status,
            "failure": failure,
            "compressor": cfg.method.compression.get("compressor", "none"),
            **{f"grid:{k}": canonical(cell.overrides.get(k)) for k in varied},
            "commit": run.data.tags.get(COMMIT_TAG, ""),
            "dirty": run.data.tags.get(DIRTY_TAG, ""),
            "code_digest": run.data.tags.get(CODE_DIGEST_TAG, ""),
            "code": code_label(run.data.tags),
            "stopped_early": run.data.tags.get(CONVERGED_TAG, ""),
            "rounds": cfg.rounds,
            "last_k": cfg.last_k,
            "eval_every": cfg.eval_every,
        }
        for key, metric, _ in COLUMNS:
            row[key] = run.data.metrics.get(metric, np.nan) if status == "FINISHED" else np.nan
        row["epsilon"], row["delta"] = (run_privacy(run) if status == "FINISHED"
                                        else (np.nan, np.nan))
        row["gb_sent"] = row["gb_sent"] / 1e9
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values(["dataset", "alpha"], kind="stable").reset_index(drop=True)
    return frame


def _failure_text(reason: str) -> str:
    """``diverged at round 7`` from a run's failure reason, else its first line."""
    found = re.search(r"diverged at round \d+", reason)
    return found.group(0) if found else reason.splitlines()[0][:120]


def histories(client: MlflowClient, run_ids: list[str], metric: str) -> dict[str, pd.Series]:
    out = {}
    for run_id in run_ids:
        hist = client.get_metric_history(run_id, metric)
        series = pd.Series({m.step: m.value for m in sorted(hist, key=lambda m: m.timestamp)})
        out[run_id] = series.sort_index()
    return out


def final_client_accuracy(artifact_uri: str, tmp: Path) -> np.ndarray:
    """The last evaluated round's per-client accuracies, read from the run's artifact folder
    (its URI straight away: a ``runs:/`` download first searches the run's logged models)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    tmp.mkdir(parents=True, exist_ok=True)
    repository = get_artifact_repository(artifact_uri)
    local = repository.download_artifacts(  # type: ignore[no-untyped-call]
        "per_client.parquet", str(tmp))
    frame = pd.read_parquet(local)
    last = frame[frame["round"] == frame["round"].max()]
    accuracy: np.ndarray = last["accuracy"].dropna().to_numpy()
    return accuracy


def other_code_hint(spec: SweepSpec, settings: TrackingSettings) -> str:
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


def run_privacy(run: Run) -> tuple[float, float]:
    """(epsilon spent by the run's last round, its delta); (inf, nan) without a mechanism."""
    eps = run.data.metrics.get(EPSILON_METRIC)
    if eps is None:
        return math.inf, math.nan
    return float(eps), float(run.data.params.get(DELTA_PARAM, "nan"))


def clocks(client: MlflowClient, runs: pd.DataFrame) -> dict[str, pd.Series]:
    """Each run's simulated clock by round (step); empty when no run has one."""
    out = {}
    for run_id in runs["run_id"]:
        hist = client.get_metric_history(run_id, TIME_METRIC)
        if hist:
            out[run_id] = pd.Series({m.step: m.value for m in hist}).sort_index()
    return out
