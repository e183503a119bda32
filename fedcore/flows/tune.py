"""Prefect flow ``tune``: an Optuna study whose trials run in parallel through the task runner."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Annotated, Any

import optuna
from optuna.trial import TrialState
from prefect import State, flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

import fedcore.flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore.core.config import parse_overrides
from fedcore.core.runtime import stopping
from fedcore.flows.artifacts import publish_table
from fedcore.flows.run_names import tune_run_name
from fedcore.flows.stopping import hold_sigterm, stopped_state
from fedcore.specs.study import StudySpec, load_study
from fedcore.tracking import load_settings
from fedcore.tuning.results import describe, finish_parent, trials_markdown
from fedcore.tuning.study import ask_trial, open_study, run_trial, study_parent_run


@task(name="trial", cache_policy=NO_CACHE, tags=["fedcore-sim"])
def trial_task(
    study: optuna.Study, spec: StudySpec, parent_run_id: str, trial: optuna.Trial
) -> dict[str, Any]:
    """One asked trial: simulate it as a nested MLflow run and tell Optuna its outcome;
    skipped (Optuna FAIL) when a stop came before it started."""
    if stopping.requested():
        study.tell(trial, state=TrialState.FAIL)
        return {"state": "SKIPPED"}
    try:
        return asdict(run_trial(study, spec, parent_run_id, trial))
    except stopping.StopRequested:  # run_trial told Optuna FAIL; its MLflow run is KILLED
        return {"state": "SKIPPED"}


@flow(name="tune", flow_run_name=tune_run_name, log_prints=True)
def tune(
    study_file: Annotated[
        str, Field(description="a study YAML (configs/studies/*.yaml) or a shipped study name")
    ],
    overrides: Annotated[
        list[str] | None,
        Field(description="KEY=VALUE: study keys (n_trials, timeout, storage, study_name, "
              "sampler.*, pruner.*, heartbeat.*) or base experiment keys applied to every trial"),
    ] = None,
    max_workers: Annotated[int, Field(ge=1, description="trials run at once")] = 1,
) -> list[dict[str, Any]] | State[Any]:
    """Run (or resume) the study of STUDY_FILE with ``max_workers`` trials at a time.

    The trials share one sampler; other processes on the same storage share the study. A trial
    is asked when a worker is free (no new one after ``timeout``), so its task run is named
    ``trial-<N>`` with N its Optuna number (its MLflow run: ``<study>-trial-<N>``).

    SIGTERM or SIGINT stops it: no new trial starts, the trials in flight end after their
    current round (Optuna FAIL, MLflow KILLED), and the flow run ends Cancelled.

    Args:
        study_file: a study YAML (configs/studies/*.yaml) or a shipped study name.
        overrides: KEY=VALUE strings: study keys (n_trials, timeout, storage, study_name,
            sampler.*, pruner.*, heartbeat.*) or base experiment keys applied to every trial.
        max_workers: trials run at once (threads sharing one sampler).
    """
    hold_sigterm()
    spec = load_study(study_file, parse_overrides(overrides or []))
    study = open_study(spec)
    parent = study_parent_run(spec)
    deadline = time.monotonic() + spec.timeout if spec.timeout else None
    rows: list[dict[str, Any]] = []
    running: set[PrefectFuture[dict[str, Any]]] = set()
    asked = 0
    with ThreadPoolTaskRunner[dict[str, Any]](max_workers=max_workers) as runner:
        while True:
            while len(running) < max_workers and (spec.n_trials is None or asked < spec.n_trials):
                if stopping.requested() or (
                    deadline is not None and time.monotonic() >= deadline
                ):
                    break
                trial = ask_trial(study)  # here, so that the task run is named by its number
                asked += 1
                running.add(runner.submit(
                    trial_task.with_options(task_run_name=f"trial-{trial.number}"),
                    {"study": study, "spec": spec, "parent_run_id": parent, "trial": trial},
                ))
            if not running:
                break
            done = next(as_completed(list(running)))
            running.remove(done)
            row = done.result()
            if row["state"] == "SKIPPED":
                continue
            rows.append(row)
            print(describe(spec, row["number"], row["state"], row["values"], row["params"]))
    finish_parent(study, spec, parent, "KILLED" if stopping.requested() else "FINISHED")
    if stopping.requested():
        return stopped_state(f"study {spec.study_name}")
    publish_table(f"study-{spec.study_name}", trials_markdown(study, spec), load_settings(),
                  parent, [{**r, "trial": f"trial {r['number']}"} for r in rows], label="trial")
    return rows
