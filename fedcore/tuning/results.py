"""A study's results: best trial(s) as ready YAML files, plots, and the parent run's artifacts."""

from __future__ import annotations

import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from fedcore.core.compose.configure import build_config
from fedcore.core.config import ExperimentConfig, writable_config_dir
from fedcore.figures.plots import _pyplot
from fedcore.specs.study import StudySpec
from fedcore.tracking import load_settings, mlflow_client
from fedcore.tracking.parents import markdown_rows, set_description


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial (one objective) or the Pareto-optimal trials (several), by number."""
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return sorted(study.best_trials, key=lambda t: t.number)


def result_name(spec: StudySpec, trial: FrozenTrial, study: optuna.Study) -> str:
    """``<study>_best`` for one objective, ``<study>_pareto_t<N>`` for a Pareto trial."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.study_name)
    return f"{stem}_best" if len(study.directions) == 1 else f"{stem}_pareto_t{trial.number}"


def trial_config(spec: StudySpec, trial: FrozenTrial) -> tuple[ExperimentConfig, str]:
    """The resolved config the trial ran, and where it came from.

    First the trial's user attribute ``config`` (stored when the trial started), then its
    MLflow run's ``config.yaml``; only a trial with neither (older studies) is rebuilt from the
    study file and the overrides given now.
    """
    stored = trial.user_attrs.get("config")
    if isinstance(stored, dict):
        return build_config(stored), "the trial's stored config"
    run_id = trial.user_attrs.get("mlflow_run_id")
    if run_id:
        try:
            client = mlflow_client(load_settings())
            with tempfile.TemporaryDirectory() as tmp:
                local = client.download_artifacts(run_id, "config.yaml", tmp)
                return build_config(yaml.safe_load(Path(local).read_text())), (
                    f"MLflow run {run_id}")
        except Exception:  # noqa: BLE001  (run or artifact gone: rebuild below)
            pass
    cfg = spec.config_for(spec.values_from_params(trial.params))
    return cfg, "the study file and the overrides given to --best"


def trial_files(
    spec: StudySpec, trial: FrozenTrial, name: str, experiment_path: str
) -> tuple[str, str]:
    """(method YAML, experiment YAML) text of one trial; the experiment reproduces the trial."""
    cfg, origin = trial_config(spec, trial)
    resolved = cfg.resolved()
    method = {**resolved["method"], "name": name}
    score = ", ".join(f"{m}={v:.4f}"
                      for m, v in zip(spec.objective_labels, trial.values, strict=True))
    header = (
        f"# Trial {trial.number} of study {spec.study_name!r} ({score}), seed {cfg.seed}.\n"
        f"# Tuned: {', '.join(f'{k}={v}' for k, v in trial.params.items())}\n"
        f"# Config: {origin}.\n"
        "# Written by `fedcore tune --best`.\n"
    )
    experiment = {**resolved, "method": method}
    return (
        header + yaml.safe_dump(method, sort_keys=False),
        header + f"# Reproduce: fedcore run {experiment_path}\n"
        + yaml.safe_dump(experiment, sort_keys=False),
    )


def write_best(
    study: optuna.Study,
    spec: StudySpec,
    out_dir: str | Path | None = None,
    shown_as: str | None = None,
) -> list[tuple[FrozenTrial, Path, Path]]:
    """Write ``methods/<name>.yaml`` and ``experiments/<name>.yaml`` under ``out_dir``.

    ``out_dir`` defaults to configs/, so ``method=<study>_best`` selects the tuned method;
    ``shown_as`` is the folder named in the files' "Reproduce" line (default: where they are).
    """
    root = Path(out_dir) if out_dir is not None else writable_config_dir()
    written = []
    for trial in best_trials(study):
        name = result_name(spec, trial, study)
        method_path = root / "methods" / f"{name}.yaml"
        experiment_path = root / "experiments" / f"{name}.yaml"
        folder = shown_as or ("configs" if out_dir is None else str(root))
        shown = f"{folder}/experiments/{name}.yaml"
        method_text, experiment_text = trial_files(spec, trial, name, shown)
        for path, text in ((method_path, method_text), (experiment_path, experiment_text)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        written.append((trial, method_path, experiment_path))
    return written


def state_counts(study: optuna.Study) -> dict[str, int]:
    counts = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    return {state: counts.get(state, 0) for state in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}


def plots(study: optuna.Study, spec: StudySpec, out: Path) -> list[str]:
    """Optimisation history, parameter importance and (several objectives) Pareto front PNGs.

    A plot Optuna cannot draw yet (e.g. importance with < 2 completed trials) is left out.
    """
    from optuna.visualization import matplotlib as vis

    plt = _pyplot()
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    jobs: list[tuple[str, Any]] = []
    for i, metric in enumerate(spec.metrics):
        suffix = "" if len(spec.metrics) == 1 else f"_{metric.replace('/', '_')}"
        kw: dict[str, Any] = {}
        if len(spec.metrics) > 1:
            kw = {"target": lambda t, i=i: t.values[i], "target_name": metric}
        jobs.append((f"optimization_history{suffix}.png",
                     lambda kw=kw: vis.plot_optimization_history(study, **kw)))
        varied = any(len({repr(t.params.get(p.key)) for t in done}) > 1 for p in spec.params)
        if len(done) >= 2 and varied:
            jobs.append((f"param_importances{suffix}.png",
                         lambda kw=kw: vis.plot_param_importances(study, **kw)))
    if len(spec.metrics) == 2 and done:
        jobs.append(("pareto_front.png",
                     lambda: vis.plot_pareto_front(study, target_names=list(spec.metrics))))
    made = []
    for name, draw in jobs:
        # Optuna switches the global style to ggplot; rc_context restores it for later plots
        with warnings.catch_warnings(), plt.rc_context():
            warnings.simplefilter("ignore")
            try:
                ax = draw()
            except (ValueError, RuntimeError, ZeroDivisionError):
                continue
            first = ax.flat[0] if hasattr(ax, "flat") else ax
            fig = first.figure
            fig.savefig(out / name, dpi=100, bbox_inches="tight")
            plt.close(fig)
        made.append(name)
    return made


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "study": {
        "trials/<state>": "trials of the study by state: complete, pruned, fail",
        "best/<metric>": (
            "best value of each objective metric of the study (also best/final_accuracy of a sweep)"
        ),
    },
}


def finish_parent(
    study: optuna.Study, spec: StudySpec, parent_run_id: str, status: str = "FINISHED"
) -> list[str]:
    """Log the best YAMLs, the plots and trial counts on the study's run; end it with
    ``status`` (KILLED after a stop)."""
    client = mlflow_client(load_settings())
    counts = state_counts(study)
    for state, n in counts.items():
        client.log_metric(parent_run_id, f"trials/{state.lower()}", n)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        written = write_best(study, spec, out, shown_as="configs")
        made = plots(study, spec, out)
        client.log_artifacts(parent_run_id, str(out))
    for trial, _, _ in written[:1] if len(spec.metrics) == 1 else []:
        client.set_tag(parent_run_id, "best_trial", str(trial.number))
        for metric, value in zip(spec.metrics, trial.values, strict=True):
            client.log_metric(parent_run_id, f"best/{metric}", value)
    if len(spec.metrics) > 1:
        pareto = ",".join(str(t.number) for t, _, _ in written)
        client.set_tag(parent_run_id, "pareto_trials", pareto)
    set_description(client, parent_run_id, trials_markdown(study, spec))
    client.set_terminated(parent_run_id, status)
    return made


def trial_rows(study: optuna.Study, spec: StudySpec) -> list[dict[str, Any]]:
    """One row per trial: number, state, objective values, tuned params, MLflow run id."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name}
        for i, metric in enumerate(spec.metrics):
            row[metric] = float(t.values[i]) if t.values else None
        row.update(t.params)
        row["run_id"] = t.user_attrs.get("mlflow_run_id")
        rows.append(row)
    return rows


def trials_markdown(study: optuna.Study, spec: StudySpec) -> str:
    """The study's trials as a Markdown table with a header line (the parent's description)."""
    rows = trial_rows(study, spec)
    columns = ["trial", "state", *spec.metrics, *(p.key for p in spec.params), "run_id"]
    counts = ", ".join(f"{n} {s.lower()}" for s, n in state_counts(study).items() if n)
    objective = "; ".join(spec.objective_labels)
    return (f"### Study `{spec.study_name}`: {len(rows)} trials ({counts}); "
            f"objective: {objective}\n\n"
            + markdown_rows(rows, columns))


def describe(
    spec: StudySpec, number: int, state: str, values: Sequence[float] | None, params: dict[str, Any]
) -> str:
    """One line per trial: state, number, objective values and tuned params."""
    score = (
        "  ".join(f"{m}={v:.4f}" for m, v in zip(spec.objective_labels, values, strict=True))
        if values else "-"
    )
    tuned = "  ".join(
        f"{k.rsplit('.', 1)[-1]}={v:.4g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
        for k, v in params.items()
    )
    return f"[{state}] trial {number}  {score}  {tuned}"
