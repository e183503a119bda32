"""``fedcore tune``: run or resume a study, or print and write its best trial(s)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fedcore.core.config import ConfigError, ExperimentConfig, parse_overrides

if TYPE_CHECKING:
    from fedcore.specs.study import StudySpec
    from fedcore.tuning.study import TrialOutcome


def tune_command(
    study_file: str, overrides: list[str], best: bool, out: str | None, workers: int
) -> int:
    """Validate everything first; then run trials (or, with ``best``, report the stored ones)."""
    from fedcore.runtime_env.invocation import fedcore_command
    from fedcore.specs.study import find_study_file, load_study

    if workers < 1:
        raise ConfigError(f"--workers: expected an int >= 1 (got {workers})")
    spec = load_study(study_file, parse_overrides(overrides))
    if best:
        return _best(spec, out)
    from fedcore.specs.sweep import check_resources

    check_resources(_bound_configs(spec))  # data files and devices, before any trial
    from fedcore.tuning.results import describe

    if workers > 1:
        from fedcore.flows.server import prefect_api
        from fedcore.flows.tune import tune as tune_flow

        with prefect_api():  # a temporary server dies with this process
            flow_rows = tune_flow(str(find_study_file(study_file).resolve()), overrides, workers)
        if not isinstance(flow_rows, list):  # Cancelled (a stop): Prefect raises it first
            return 1
        rows = flow_rows
    else:
        from fedcore.tuning.study import tune

        def show(o: TrialOutcome) -> None:
            print(describe(spec, o.number, o.state, o.values, o.params), flush=True)

        _, outcomes = tune(spec, on_trial=show)
        rows = [o.__dict__ for o in outcomes]
    print(f"\n{len(rows)} trial(s) of study {spec.study_name!r} in {spec.storage_label()}; "
          f"best: {fedcore_command()} tune --best {study_file}" + _study_keys(overrides))
    return 0


def _bound_configs(spec: StudySpec) -> Iterator[ExperimentConfig]:
    """The configs at every bound / choice of the search space (what load_study validated)."""
    anchor = {p.key: p.candidates()[0] for p in spec.params}
    yield spec.config_for(anchor)
    for p in spec.params:
        for value in p.candidates()[1:]:
            yield spec.config_for({**anchor, p.key: value})


def _best(spec: StudySpec, out: str | None) -> int:
    from fedcore.runtime_env.invocation import fedcore_command
    from fedcore.specs.tuned_alike import at_bound
    from fedcore.tuning.results import describe, state_counts, write_best
    from fedcore.tuning.study import load_existing

    study = load_existing(spec)
    counts = state_counts(study)
    written = write_best(study, spec, out)
    if not written:
        raise ConfigError(
            f"study_name={spec.study_name!r}: no COMPLETE trial yet ({counts}); run more trials"
        )
    title = "Best trial" if len(spec.metrics) == 1 else f"Pareto front ({len(written)} trials)"
    print(f"{title} of {spec.study_name!r} ("
          + ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) + "):")
    for trial, method_path, experiment_path in written:
        print(describe(spec, trial.number, trial.state.name, trial.values, trial.params))
        for param in spec.params:
            bound = at_bound(param, trial.params.get(param.key))
            if bound:
                print(f"  at a bound: {bound}")
        select = (f"method={method_path.stem}" if out is None
                  else f'method="$(cat {_rel(method_path)})"')
        print(f"  method: {_rel(method_path)} (select with {select})")
        experiment = _rel(experiment_path)
        print(f"  experiment: {experiment} ({fedcore_command()} run {experiment})")
    return 0


def _study_keys(overrides: list[str]) -> str:
    """The overrides that locate the study (storage, study_name), for the ``--best`` hint."""
    keys = [o for o in overrides if o.split("=", 1)[0] in ("storage", "study_name")]
    return "".join(f" {k}" for k in keys)


def _rel(path: Path) -> str:
    """``path`` relative to the current folder where it lies inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def cmd_tune(args: argparse.Namespace) -> int:
    """Run the ``tune`` command."""
    return tune_command(args.study, args.overrides, args.best, args.out, args.workers)


def add_tune(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``tune`` command's parser."""
    p_tune = sub.add_parser(
        "tune", help="run (or resume) an Optuna study; --best writes the tuned method YAML",
        epilog="Overrides set study keys (n_trials, timeout, storage, study_name, average_last, "
        "sampler.*, pruner.*, heartbeat.*) or any key of the base experiment, e.g. n_trials=10 "
        "rounds=5.",
    )
    p_tune.add_argument("study", metavar="STUDY.yaml", help="a study file or a shipped study name")
    p_tune.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p_tune.add_argument("--best", action="store_true",
                        help="print the best trial(s) and write their YAMLs; runs no trial")
    p_tune.add_argument("--out", help="folder for --best's methods/ and experiments/ "
                        "(default: configs/)")
    p_tune.add_argument("--workers", type=int, default=1,
                        help="trials in parallel (>1: through the Prefect flow tune)")
    p_tune.set_defaults(func=cmd_tune)
