"""Optuna studies: sampler, pruner, storage, and one trial as one nested MLflow run.

A running trial records a heartbeat in the storage; before asking for a trial, a process fails
the trials whose heartbeat stopped (their process was killed) and queues their retry.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.exc import OperationalError

from fedcore.core.callbacks import Callback, RoundRecord, RoundVerdict
from fedcore.core.config import ConfigError
from fedcore.core.runtime import stopping
from fedcore.specs.objective import trial_value
from fedcore.specs.study import StudySpec
from fedcore.specs.study_fields import Param
from fedcore.tracking import get_experiment_id, load_settings, mlflow_client
from fedcore.tracking.links import run_url
from fedcore.tracking.mlflow_tracker import store_lock
from fedcore.tracking.parents import log_source
from fedcore.tracking.runner import run_tracked

SQLITE_TIMEOUT_S = 600  # how long a process waits for another's write lock on a shared SQLite file
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_sampler(spec: StudySpec, stored_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler, seeded for a study that holds ``stored_trials`` trials already."""
    kind, seed = spec.sampler["type"], resumed_seed(spec.sampler["seed"], stored_trials)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "nsga2":
        kwargs = {k: spec.sampler[k] for k in ("population_size",) if k in spec.sampler}
        return optuna.samplers.NSGAIISampler(seed=seed, **kwargs)
    kwargs = {k: spec.sampler[k] for k in ("n_startup_trials",) if k in spec.sampler}
    return optuna.samplers.TPESampler(seed=seed, **kwargs)


def resumed_seed(seed: int | None, stored_trials: int) -> int | None:
    """The sampler's seed: ``seed`` for a new study (reproducible), else one derived from
    ``seed`` and the number of trials already stored, so that a resumed study does not propose
    its first trials' parameters again (and a resume after as many trials proposes the same)."""
    if seed is None or stored_trials == 0:
        return seed
    return int(np.random.SeedSequence([seed, stored_trials]).generate_state(1)[0])


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    kind = spec.pruner["type"]
    kwargs = {k: v for k, v in spec.pruner.items() if k not in ("type", "metric")}
    if kind == "median":
        return optuna.pruners.MedianPruner(**kwargs)
    if kind == "percentile":
        return optuna.pruners.PercentilePruner(**kwargs)
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(**kwargs)
    if kind == "threshold":
        return optuna.pruners.ThresholdPruner(**kwargs)
    return optuna.pruners.NopPruner()


def make_storage(url: str, spec: StudySpec | None = None) -> optuna.storages.RDBStorage:
    """RDB storage; SQLite waits for other processes' locks instead of failing at once.

    A new SQLite file gets its schema under an exclusive ``flock`` on ``<file>.lock`` (processes
    starting together: one creates it, the others wait and find it ready). With ``spec``, the
    storage records heartbeats of running trials and fails stale ones (``StaleTrials``).
    """
    sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = (
        {"engine_kwargs": {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}} if sqlite else {}
    )
    if spec is not None:
        kwargs.update(heartbeat_interval=spec.heartbeat["interval"],
                      grace_period=spec.heartbeat["grace_period"],
                      heartbeat_stale_trial_callback=StaleTrials(spec))
    for attempt in range(5):
        try:
            with store_lock(url, "study.storage"), warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeat arguments
                return optuna.storages.RDBStorage(url, **kwargs)
        except OperationalError:  # a server database's schema created by two processes at once
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


class StaleTrials:
    """Called by Optuna for each trial it failed because its heartbeat stopped (its process was
    killed): ends the trial's MLflow run FAILED if it is still RUNNING, then queues a retry with
    the same parameters (at most ``heartbeat.max_retry`` times per original trial)."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            self.retry = RetryHeartbeatStaleTrialCallback(max_retry=spec.heartbeat["max_retry"])

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        parent = _find_parent_run(self.spec)
        run_id = _trial_run_id(parent, trial.number) if parent else None
        client = mlflow_client(load_settings())
        if run_id is not None and client.get_run(run_id).info.status == "RUNNING":
            grace = self.spec.heartbeat["grace_period"]
            client.set_tag(run_id, "trial_state", "FAIL")
            client.set_tag(run_id, "failure_reason",
                           f"no heartbeat for {grace} s: the trial's process died")
            client.set_terminated(run_id, RUN_STATUS["FAIL"])
        if self.spec.heartbeat["max_retry"] > 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                self.retry(study, trial)


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the study's RUNNING trials whose heartbeat is older than the grace period."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def ask_trial(study: optuna.Study) -> optuna.Trial:
    """A new trial (or a queued retry), after failing trials whose process died."""
    fail_stale_trials(study)
    with warnings.catch_warnings():  # run_trial records the heartbeat as Study.optimize does
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed", UserWarning)
        return study.ask()


def open_study(spec: StudySpec) -> optuna.Study:
    """Create the study, or resume it when one of that name exists in the storage."""
    kwargs: dict[str, Any] = {
        "storage": make_storage(spec.storage, spec),
        "sampler": make_sampler(spec),
        "pruner": make_pruner(spec),
        "study_name": spec.study_name,
        "load_if_exists": True,
    }
    if spec.multi_objective:
        kwargs["directions"] = list(spec.directions)
    else:
        kwargs["direction"] = spec.directions[0]
    study = optuna.create_study(**kwargs)
    stored = len(study.get_trials(deepcopy=False))
    if stored:  # resumed: not the sampler's sequence from its first trial again
        study.sampler = make_sampler(spec, stored)
    if [d.name.lower() for d in study.directions] != list(spec.directions):
        raise ConfigError(
            f"study_name={spec.study_name!r}: the stored study has direction(s) "
            f"{[d.name.lower() for d in study.directions]}, this file asks for "
            f"{list(spec.directions)}; allowed: a new study_name"
        )
    _check_average_last(study, spec, stored)
    study.set_user_attr("metrics", list(spec.metrics))
    with warnings.catch_warnings():  # set_metric_names is marked experimental
        warnings.simplefilter("ignore")
        study.set_metric_names(list(spec.metrics))  # the dashboard's axis names
    return study


def _check_average_last(study: optuna.Study, spec: StudySpec, stored: int) -> None:
    """A stored study's trials keep the score they were given: resuming it with another
    ``average_last`` would rank trials scored two ways (studies from before the setting scored
    the last evaluation only, i.e. 1)."""
    before = study.user_attrs.get("average_last", 1 if stored else None)
    if before is not None and before != spec.average_last:
        raise ConfigError(
            f"study_name={spec.study_name!r}: the stored study scored its trials with "
            f"average_last={before}, this file asks for {spec.average_last}; allowed: "
            f"average_last={before} or a new study_name"
        )
    study.set_user_attr("average_last", spec.average_last)


def load_existing(spec: StudySpec) -> optuna.Study:
    try:
        return optuna.load_study(study_name=spec.study_name, storage=make_storage(spec.storage))
    except KeyError:
        raise ConfigError(
            f"study_name={spec.study_name!r}: no such study in {spec.storage_label()}; "
            f"run fedcore tune first"
        ) from None


def suggest(trial: optuna.Trial, p: Param) -> Any:
    if p.type == "categorical":
        return p.from_label(trial.suggest_categorical(p.key, p.choice_labels()))
    low, high = p.bounds()
    if p.type == "int":
        return trial.suggest_int(p.key, int(low), int(high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(p.key, float(low), float(high), step=p.step, log=p.log)


class PruningReporter(Callback):
    """Round-loop callback: reports the per-round metric to the trial and, when the pruner
    says so, stops the run after that round (the trial is PRUNED, its MLflow run KILLED)."""

    def __init__(self, trial: optuna.Trial, metric: str) -> None:
        self.trial = trial
        self.metric = metric

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        metrics, round = record.metrics, record.round
        if self.metric not in metrics:
            return None
        self.trial.report(float(metrics[self.metric]), round)
        if self.trial.should_prune():
            return RoundVerdict(
                stop=f"pruned at round {round} ({self.metric}={metrics[self.metric]:.4f})"
            )
        return None


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    state: str
    values: list[float] | None
    run_id: str | None
    params: dict[str, Any]


def study_parent_run(spec: StudySpec) -> str:
    """Get or create the study's parent MLflow run (one per study name and storage)."""
    settings = load_settings()
    client = mlflow_client(settings)
    exp_id = get_experiment_id(client, settings)
    query = _parent_query(spec)
    found = list(client.search_runs([exp_id], filter_string=query))
    if not found:
        run = client.create_run(
            exp_id,
            run_name=f"study-{spec.study_name}",
            tags={"fedcore.role": "study", "study": spec.study_name,
                  "storage": spec.storage_label()},
        )
        client.log_param(run.info.run_id, "metrics", ",".join(spec.metrics))
        client.log_param(run.info.run_id, "directions", ",".join(spec.directions))
        client.log_param(run.info.run_id, "objective", ",".join(spec.objective_labels))
        client.log_param(run.info.run_id, "search", ",".join(p.key for p in spec.params))
        log_source(client, run.info.run_id, spec.path,
                   [f"{k}={v}" for k, v in spec.overrides.items()], "study.yaml")
        found = list(client.search_runs([exp_id], filter_string=query))
        keep = min(found, key=lambda r: (r.info.start_time, r.info.run_id))
        if keep.info.run_id != run.info.run_id:  # another process created it first
            client.delete_run(run.info.run_id)
        found = [keep]
    run_id: str = min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
    client.update_run(run_id, status="RUNNING")
    return run_id


def _parent_query(spec: StudySpec) -> str:
    return (
        f"tags.`fedcore.role` = 'study' and tags.study = '{spec.study_name}' "
        f"and tags.storage = '{spec.storage_label()}'"
    )


def _find_parent_run(spec: StudySpec) -> str | None:
    """The study's parent MLflow run, if one exists (the oldest, as ``study_parent_run``)."""
    settings = load_settings()
    client = mlflow_client(settings)
    found = client.search_runs([get_experiment_id(client, settings)], _parent_query(spec))
    if not found:
        return None
    run_id: str = min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
    return run_id


def run_trial(
    study: optuna.Study, spec: StudySpec, parent_run_id: str, trial: optuna.Trial | None = None
) -> TrialOutcome:
    """Simulate one trial (``trial``, or a new one asked here) as a nested MLflow run, and tell
    Optuna its outcome; the trial records a heartbeat while it runs."""
    trial = trial or ask_trial(study)
    with get_heartbeat_thread(trial._trial_id, study._storage):
        return _run_trial(study, spec, parent_run_id, trial)


def _run_trial(
    study: optuna.Study, spec: StudySpec, parent_run_id: str, trial: optuna.Trial
) -> TrialOutcome:
    run_id: str | None = None
    values: list[float] | None = None
    try:
        config_values = {p.key: suggest(trial, p) for p in spec.params}
        cfg = spec.config_for(config_values)
        trial.set_user_attr("config", cfg.resolved())  # what `tune --best` writes back
        callbacks: list[Callback] = []
        if spec.pruner["type"] != "none":
            callbacks.append(PruningReporter(trial, spec.pruner["metric"]))
        tags = {"fedcore.role": "trial", "study": spec.study_name,
                "trial_number": str(trial.number), "trial_state": "RUNNING"}
        run_id, result = run_tracked(cfg, parent_run_id=parent_run_id, callbacks=callbacks,
                                     tags=tags, resume=False,
                                     run_name=f"{spec.study_name}-trial-{trial.number}")
        if result.stopped is None:
            values = [trial_value(m, result.history, result.summary, spec.average_last)
                      for m in spec.metrics]
            state = "COMPLETE"
        else:  # the pruning reporter stopped it
            state = "PRUNED"
    except Exception as exc:
        state = "FAIL"
        trial.set_user_attr("failure_reason", f"{type(exc).__name__}: {exc}"[:2000])
    except BaseException as exc:  # a stop or Ctrl-C: the trial is FAIL, not RUNNING forever
        trial.set_user_attr("failure_reason", f"{type(exc).__name__}: {exc}"[:2000])
        study.tell(trial, state=TrialState.FAIL)
        if isinstance(exc, stopping.StopRequested):  # its run is KILLED; say so on the run too
            stopped = _trial_run_id(parent_run_id, trial.number)
            if stopped is not None:
                mlflow_client(load_settings()).set_tag(stopped, "trial_state", "FAIL")
        raise
    run_id = run_id or _trial_run_id(parent_run_id, trial.number)
    if run_id is not None:
        trial.set_user_attr("mlflow_run_id", run_id)
        trial.set_user_attr("mlflow_run_url", _run_url(run_id))
        mlflow_client(load_settings()).set_tag(run_id, "trial_state", state)
    if state == "COMPLETE":
        assert values is not None  # a COMPLETE trial has its metrics
        study.tell(trial, values if spec.multi_objective else values[0])
    else:
        study.tell(trial, state=TrialState.PRUNED if state == "PRUNED" else TrialState.FAIL)
    return TrialOutcome(trial.number, state, values, run_id, dict(trial.params))


def _run_url(run_id: str) -> str:
    """The trial's MLflow run in the UI (a link in optuna-dashboard's user attributes)."""
    settings = load_settings()
    exp_id = mlflow_client(settings).get_run(run_id).info.experiment_id
    return run_url(settings, exp_id, run_id)


def _trial_run_id(parent_run_id: str, number: int) -> str | None:
    """The MLflow run of a trial that ended with an exception (run_tracked re-raised it)."""
    settings = load_settings()
    client = mlflow_client(settings)
    runs = client.search_runs(
        [get_experiment_id(client, settings)],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}' "
        f"and tags.trial_number = '{number}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def optimize(
    study: optuna.Study,
    spec: StudySpec,
    parent_run_id: str,
    on_trial: Callable[[TrialOutcome], None] | None = None,
) -> list[TrialOutcome]:
    """Run trials one after another until n_trials ran in this process or timeout passed
    (or a stop was requested: SIGTERM / SIGINT)."""
    deadline = time.monotonic() + spec.timeout if spec.timeout else None
    outcomes: list[TrialOutcome] = []
    while spec.n_trials is None or len(outcomes) < spec.n_trials:
        if stopping.requested() or (deadline is not None and time.monotonic() >= deadline):
            break
        try:
            outcomes.append(run_trial(study, spec, parent_run_id))
        except stopping.StopRequested:  # the trial is FAIL, its run KILLED; no new trial
            break
        if on_trial is not None:
            on_trial(outcomes[-1])
    return outcomes


def tune(
    spec: StudySpec, on_trial: Callable[[TrialOutcome], None] | None = None
) -> tuple[optuna.Study, list[TrialOutcome]]:
    """Open (or resume) the study, run its trials in this process, and report on the parent run."""
    from fedcore.tuning.results import finish_parent

    study = open_study(spec)
    parent = study_parent_run(spec)
    outcomes = optimize(study, spec, parent, on_trial)
    finish_parent(study, spec, parent, "KILLED" if stopping.requested() else "FINISHED")
    return study, outcomes
