"""Prefect flow ``tune``: an Optuna study whose trials run in parallel through the task runner."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Annotated, Any

import optuna
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.states import State
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

import flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore import stopping
from fedcore.config import parse_overrides
from fedcore.tracking import load_settings
from fedcore.tuning.results import describe, finish_parent, trials_markdown
from fedcore.tuning.spec import StudySpec, load_study
from fedcore.tuning.study import open_study, run_trial, study_parent_run
from flows.artifacts import publish_table
from flows.stopping import hold_sigterm, stopped_state


@task(name="trial", cache_policy=NO_CACHE, tags=["fedcore-sim"])
def trial_task(
    study: optuna.Study, spec: StudySpec, parent_run_id: str, deadline: float | None
) -> dict[str, Any]:
    """One trial (ask, simulate as a nested MLflow run, tell); skipped after the timeout."""
    if stopping.requested() or (deadline is not None and time.monotonic() >= deadline):
        return {"state": "SKIPPED"}
    try:
        return asdict(run_trial(study, spec, parent_run_id))
    except stopping.StopRequested:  # run_trial told Optuna FAIL; its MLflow run is KILLED
        return {"state": "SKIPPED"}


@flow(name="tune", log_prints=True)
def tune(
    study_file: Annotated[
        str, Field(description="a study YAML (configs/studies/*.yaml) or a shipped study name")
    ],
    overrides: Annotated[
        list[str] | None,
        Field(description="KEY=VALUE: study keys (n_trials, timeout, storage, study_name, "
              "sampler.*, pruner.*) or base experiment keys applied to every trial"),
    ] = None,
    max_workers: Annotated[int, Field(ge=1, description="trials run at once")] = 1,
) -> list[dict[str, Any]] | State:
    """Run (or resume) the study of STUDY_FILE with ``max_workers`` trials at a time.

    SIGTERM or SIGINT stops it: no new trial starts, the trials in flight end after their
    current round (Optuna FAIL, MLflow KILLED), and the flow run ends Cancelled.

    The trials share one sampler; other processes on the same storage share the study.

    Args:
        study_file: a study YAML (configs/studies/*.yaml) or a shipped study name.
        overrides: KEY=VALUE strings: study keys (n_trials, timeout, storage, study_name,
            sampler.*, pruner.*) or base experiment keys applied to every trial.
        max_workers: trials run at once (threads sharing one sampler).
    """
    hold_sigterm()
    spec = load_study(study_file, parse_overrides(overrides or []))
    study = open_study(spec)
    parent = study_parent_run(spec)
    deadline = time.monotonic() + spec.timeout if spec.timeout else None
    rows: list[dict[str, Any]] = []
    with ThreadPoolTaskRunner(max_workers=max_workers) as runner:
        while spec.n_trials is None or len(rows) < spec.n_trials:
            if stopping.requested() or (deadline is not None and time.monotonic() >= deadline):
                break
            wave = max_workers if spec.n_trials is None else spec.n_trials - len(rows)
            futures = [
                runner.submit(trial_task, {"study": study, "spec": spec,
                                           "parent_run_id": parent, "deadline": deadline})
                for _ in range(wave)
            ]
            for future in futures:
                row = future.result()
                if row["state"] == "SKIPPED":
                    continue
                rows.append(row)
                print(describe(spec, row["number"], row["state"], row["values"], row["params"]))
            if all(f.result()["state"] == "SKIPPED" for f in futures):
                break
    finish_parent(study, spec, parent)
    if stopping.requested():
        return stopped_state(f"study {spec.study_name}")
    publish_table(f"study-{spec.study_name}", trials_markdown(study, spec), load_settings(),
                  parent, [{**r, "trial": f"trial {r['number']}"} for r in rows], label="trial")
    return rows
