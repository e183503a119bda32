"""The fedcore command line: run one simulation, a sweep, a sweep's report, an Optuna study,
or the MLflow UI."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import re
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.core.callbacks import Callback, RoundRecord, RoundVerdict, RunView
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, parse_overrides
from fedcore.core.runtime import stopping

if TYPE_CHECKING:
    from fedcore.core.round.simulation import Result
    from fedcore.specs.sweep import SweepSpec
    from fedcore.tracking.store_setup import StoreHelper

DEBUG_ENV = "FEDCORE_DEBUG"  # set to 1: failures show their traceback (as --debug)
EPILOG = "Overrides are KEY=VALUE with dotted keys, e.g. dataset.alpha=0.1 rounds=50."


def _split_args(items: list[str]) -> tuple[str | None, list[str]]:
    config = None
    rest = []
    for item in items:
        if "=" not in item and config is None:
            config = item
        else:
            rest.append(item)
    return config, rest


class ProgressBar(Callback):
    """A tqdm bar over rounds that shows the latest test accuracy."""

    def on_run_start(self, run: RunView) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=run.cfg.rounds,
            initial=run.round,
            unit="round",
            file=sys.stderr,
            dynamic_ncols=True,
            desc=run.cfg.method.name,
        )

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        metrics = record.metrics
        if "test/accuracy" in metrics:
            self.bar.set_postfix(
                acc=f"{metrics['test/accuracy']:.3f}", loss=f"{metrics['train/loss']:.3f}"
            )
        self.bar.update(1)
        return None

    def on_run_end(self, result: Result) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "bar", None) is not None:
            self.bar.close()
            self.bar = None


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    def fmt(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def cmd_run(args: argparse.Namespace) -> int:
    config, overrides = _split_args(args.items)
    from fedcore.runtime_env.extras import INSTALL, missing

    tracked = not missing(("mlflow",))
    helper = _store_helper() if tracked else None  # a new store's schema, made in parallel
    run_id: str | None = None
    try:
        cfg = load_config(config, overrides)
        if tracked and helper is None:  # the figures' helper (after a new store's schema)
            from fedcore.tracking import figure_helper

            figure_helper.start()
        if not tracked:
            print(f"fedcore: note: this run is not recorded (MLflow is not installed; {INSTALL} "
                  "records runs)", file=sys.stderr)
        from fedcore.core.data.federated import build_federated_data
        from fedcore.core.round.simulation import resolve_device

        data = build_federated_data(cfg.dataset, cfg.seed, resolve_device(cfg.device),
                                    cfg.clients)
        from fedcore.core.data.holdout import of_data

        of_data(cfg.dataset, cfg.seed, data)  # a holdout that takes a class out: refused here
        if cfg.checkpoint_every:
            from fedcore.core.round import checkpoint

            checkpoint.check_key(checkpoint.run_folder(cfg).parent)
        if helper is not None:
            helper.go()  # the config and the data are valid: the store may be written
        bar = ProgressBar()
        try:
            if tracked:
                from fedcore.tracking.runner import run_tracked

                run_id, result = run_tracked(cfg, callbacks=[bar], data=data)
            else:
                from fedcore.core.round.simulation import run

                result = run(cfg, callbacks=[bar], data=data)
        finally:
            bar.close()  # before any error line, so the bar does not redraw after it
    finally:
        if helper is not None:
            helper.close()
    where = "not recorded" if run_id is None else f"MLflow run {run_id}"
    print(
        f"\n{where}  method={cfg.method.name}  dataset={cfg.dataset.name}  "
        f"alpha={cfg.dataset.alpha}  seed={cfg.seed}"
    )
    if run_id is not None:
        from fedcore.tracking.settings import load_settings
        from fedcore.tracking.ui import store_line

        print(store_line(load_settings(), run_id))
    if result.stopped is not None:
        print(f"stopped early: {result.stopped} (run it again to continue)")
    if result.converged is not None:
        print(f"finished early: {result.converged}")
    print_table([{"metric": k, "value": v} for k, v in result.summary.items()], ["metric", "value"])
    return 0


def _store_helper() -> StoreHelper | None:
    """The helper process that creates a new SQLite store's schema (None: an existing store,
    or settings that the run itself will report as wrong)."""
    from fedcore.tracking.settings import load_settings
    from fedcore.tracking.store_setup import start_helper

    try:
        return start_helper(load_settings().tracking_uri)
    except ConfigError:
        return None


def cmd_sweep(args: argparse.Namespace) -> int:
    for flag, given in (("--latex", args.latex), ("--reference", args.reference)):
        if given and not args.report:
            print(f"fedcore: error: {flag}: needs --report (it is an option of the report)",
                  file=sys.stderr)
            return 2
    helper = _store_helper()  # imports MLflow meanwhile; writes only once the input is valid
    try:
        rows, spec = _sweep_cells(args, helper)
    finally:
        if helper is not None:
            helper.close()
    if not isinstance(rows, list):  # Cancelled (a stop): Prefect raises it first
        return 1
    print()
    print_table(
        rows, ["status", "final/accuracy", "final/accuracy_worst10", "auc/accuracy", "run_name"]
    )
    failed = 1 if any(r["status"] == "failed" for r in rows) else 0
    if args.report:  # failed seeds are counted in the report's rows
        print()
        return write_report(spec, None, any_code=args.reuse_other_code,
                            reference=args.reference, latex=args.latex) or failed
    return failed


def _sweep_cells(args: argparse.Namespace, helper: StoreHelper | None) -> tuple[Any, SweepSpec]:
    """Check the sweep, then run its flow: the flow's rows (or its Cancelled state) and spec.

    A local Dask cluster is started alongside the temporary Prefect server (its workers import
    torch, MLflow and fedcore meanwhile) and the store's schema is made by the helper."""
    from fedcore.specs.sweep import check_resources, load_sweep

    spec = load_sweep(args.sweep, parse_overrides(args.overrides))  # before Prefect starts
    if args.reference is not None:  # before any cell runs
        check_reference(spec, args.reference)
    from fedcore.flows.runners import check_runner, close_early_clusters, start_cluster_early

    check_runner(args.runner, args.workers, args.dask_address, args.cells_per_gpu)
    check_resources((c.config for c in spec.cells), devices=not args.dask_address)
    from fedcore.core.data.holdout import check_holdouts

    check_holdouts(c.config for c in spec.cells)  # a holdout that takes a class out
    if helper is None and spec.screening is not None:  # an existing store: its runs
        from fedcore.tracking.confirmation import check_screening_runs

        check_screening_runs(spec)
    if helper is not None:
        helper.go()  # the input is valid: the store may be written
    from fedcore.flows.server import prefect_api
    from fedcore.flows.sweep import sweep

    def start_workers(api_url: str | None) -> None:
        if args.runner == "dask" and not args.dask_address:
            start_cluster_early(args.workers, api_url)

    try:  # a temporary server dies with this process (docs/explanation/reliability.md)
        with prefect_api(start_workers):
            rows = sweep(
                str(Path(args.sweep).resolve()), args.overrides, args.workers,
                runner=args.runner, dask_address=args.dask_address,
                cells_per_gpu=args.cells_per_gpu, reuse_other_code=args.reuse_other_code,
            )
    finally:
        close_early_clusters()
    return rows, spec


def check_reference(spec: SweepSpec, reference: str) -> None:
    """A ``--reference`` that is neither a row label nor a method of ``spec``: a ConfigError."""
    rows = list(dict.fromkeys(c.row for c in spec.cells))
    if reference not in rows and reference not in {c.config.method.name for c in spec.cells}:
        raise ConfigError(f"--reference: {reference!r} is no row or method of sweep "
                          f"{spec.name!r}; rows: {', '.join(rows)}")


def cmd_report(args: argparse.Namespace) -> int:
    from fedcore.specs.sweep import load_sweep

    spec = load_sweep(args.sweep, parse_overrides(args.overrides))
    return write_report(spec, args.out, any_code=args.any_code, reference=args.reference,
                        last_k=args.last_k, latex=args.latex)


def write_report(spec: SweepSpec, out_dir: str | None, any_code: bool = False,
                 reference: str | None = None, last_k: int | None = None,
                 latex: bool = False) -> int:
    """Write ``spec``'s report to ``out_dir`` (default reports/<sweep name>) and print its
    headline verdicts and paths; 0, or 2 with a one-line error when what was asked cannot be
    reported (no finished run, a reference that matches no row, a bad ``--last-k``)."""
    from fedcore.core.config import project_root
    from fedcore.report.headline import headline_lines
    from fedcore.report.reference import ReportInputError
    from fedcore.tracking.report import build_report
    from fedcore.tracking.sweep_runs import sweep_parent_run

    out = Path(out_dir) if out_dir else project_root() / "reports" / spec.name
    try:
        if last_k is not None and last_k < 1:
            raise ReportInputError(f"--last-k: expected an integer >= 1 (got {last_k})")
        report = build_report(spec, out, parent_run_id=sweep_parent_run(spec),
                              any_code=any_code, reference=reference, last_k=last_k,
                              latex=latex)
    except ReportInputError as exc:
        print(f"fedcore: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(headline_lines((out / "summary.md").read_text(),
                                   (out / "table.md").read_text(), out, report.files)))
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from fedcore.tracking.ui import ui_command

    return ui_command(args.host, args.port)


def run_epilog() -> str:
    """``fedcore run --help``'s lists: config keys, shipped methods, stages, samplers and
    callbacks."""
    from fedcore.core.callbacks.configured import REGISTRY as CALLBACKS
    from fedcore.core.config import method_names
    from fedcore.core.samplers.base import REGISTRY as SAMPLERS
    from fedcore.core.stages.base import REGISTRY as STAGES

    lists = [
        ("config keys (configs/experiment.yaml; docs/reference/config.md)", config_keys()),
        ("methods (method=NAME, configs/methods/*.yaml)", method_names()),
        ("stages (method.stages='[{stage: NAME, ...}]')", STAGES.names()),
        ("samplers (method.sampler='{sampler: NAME, ...}')", SAMPLERS.names()),
        ("callbacks (callbacks='[{callback: NAME, ...}]')", CALLBACKS.names()),
    ]
    return EPILOG + "".join(
        f"\n\n{title}:\n" + textwrap.fill(", ".join(names), 88, initial_indent="  ",
                                          subsequent_indent="  ")
        for title, names in lists
    )


class RunHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``fedcore run``'s help: its epilog (the registries' names, whose modules import torch)
    is built only when the help is shown, not for every command."""

    def add_text(self, text: str | None) -> None:
        super().add_text(run_epilog() if text == EPILOG else text)


def config_keys() -> list[str]:
    """Every dotted key of the experiment config (a method's own keys as method.<part>.*)."""
    from pydantic import BaseModel

    from fedcore.core.config import RECORDED, ExperimentConfig

    def walk(model: type[BaseModel], prefix: str) -> list[str]:
        keys = []
        for name, info in model.model_fields.items():
            sub = info.annotation
            if name == "method":
                keys += ["method", "method.client.*", "method.aggregator.*",
                         "method.compression.*", "method.sampler.*", "method.stages"]
            elif isinstance(sub, type) and issubclass(sub, BaseModel):
                keys += walk(sub, f"{prefix}{name}.")
            elif f"{prefix}{name}" not in RECORDED:
                keys.append(f"{prefix}{name}")
        return keys

    return walk(ExperimentConfig, "")


def cmd_tune(args: argparse.Namespace) -> int:
    from fedcore.cli.tune import tune_command

    return tune_command(args.study, args.overrides, args.best, args.out, args.workers)


def cmd_claims(args: argparse.Namespace) -> int:
    from fedcore.core.config import config_dir
    from fedcore.report.claims import markdown, tally
    from fedcore.specs.claims import load_claims

    path, overrides = _split_args(args.items)
    if args.record:
        from fedcore.specs.claims import record_claims

        added = record_claims(path or config_dir() / "claims.yaml")
        print(f"recorded {len(added)} new claim(s): {', '.join(added) or 'none'}")
        return 0
    spec = load_claims(path or config_dir() / "claims.yaml", parse_overrides(overrides))
    if spec.exploratory:
        print(f"note: overrides {spec.overrides} change the claims' fixed regime: this is a "
              "quick look, not the claims' result", file=sys.stderr)
    from fedcore.tracking.claims import run_claims_tracked

    def progress(line: str) -> None:
        print(line, file=sys.stderr)

    run_id, rows, seconds = run_claims_tracked(spec, progress=progress)
    table = markdown(rows)
    print(table)
    print(f"\n{tally(rows)}; {seconds:.0f} s; MLflow run {run_id}")
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


def _skip_final_collection() -> None:
    """Run last at exit: freeze every object, so the interpreter's final garbage collection
    does not walk torch's, MLflow's and pandas' millions of objects (1.3-1.5 s of every command's
    exit on this machine). Threads are joined, atexit handlers have run and modules are still
    torn down; only the cycle collection of the dying process is skipped."""
    gc.freeze()


def build_parser() -> argparse.ArgumentParser:
    """The ``fedcore`` parser with every command (docs/reference/cli.md is generated from it)."""
    import fedcore

    parser = argparse.ArgumentParser(prog="fedcore", description=__doc__, epilog=EPILOG)
    parser.add_argument(
        "--debug", action="store_true",
        help=f"show the traceback of a failure (also {DEBUG_ENV}=1); default: one line",
    )
    parser.add_argument("--version", action="version", version=f"fedcore {fedcore.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_run = sub.add_parser(
        "run", help="run one simulation (defaults when no CONFIG)", epilog=EPILOG,
        formatter_class=RunHelpFormatter,
    )
    p_run.add_argument("items", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]")
    p_run.set_defaults(func=cmd_run)
    p_sweep = sub.add_parser("sweep", help="run a sweep through the Prefect flow", epilog=EPILOG)
    p_sweep.add_argument("sweep", metavar="SWEEP.yaml")
    p_sweep.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p_sweep.add_argument(
        "--workers", type=int, default=1,
        help="cells run in parallel (threads, or Dask LocalCluster worker processes)",
    )
    p_sweep.add_argument(
        "--runner", default="thread",
        help="task runner: thread (this process) or dask (a Dask cluster; default thread)",
    )
    p_sweep.add_argument(
        "--dask-address", default=None, metavar="ADDRESS",
        help="scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786 "
        "(with --runner dask; without it a LocalCluster of --workers processes starts)",
    )
    p_sweep.add_argument(
        "--cells-per-gpu", type=int, default=1, metavar="N",
        help="cells allowed to share one GPU (default 1: each cell has its own GPU)",
    )
    p_sweep.add_argument(
        "--reuse-other-code", action="store_true",
        help="also skip cells whose FINISHED run was made by other code (another code digest); "
        "default: such cells run again (docs/explanation/provenance.md)",
    )
    p_sweep.add_argument(
        "--report", action="store_true",
        help="then write the sweep's report in this process, as `fedcore report SWEEP.yaml` "
        "would (reports/<sweep name>; of any code with --reuse-other-code)",
    )
    p_sweep.add_argument(
        "--latex", action="store_true",
        help="with --report: also write families.tex and statistics.md, as `fedcore report "
        "--latex` does",
    )
    p_sweep.add_argument(
        "--reference", default=None, metavar="ROW",
        help="with --report: the reference row of the exploratory table, as `fedcore report "
        "--reference` (checked before any cell runs; default: fedavg, else the first row)",
    )
    p_sweep.set_defaults(func=cmd_sweep)
    p_report = sub.add_parser(
        "report", help="comparison table and plots of a sweep's finished runs", epilog=EPILOG
    )
    p_report.add_argument("sweep", metavar="SWEEP.yaml")
    p_report.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                          help="the overrides the sweep was run with")
    p_report.add_argument("--out", help="output folder (default: reports/<sweep name>)")
    p_report.add_argument(
        "--any-code", action="store_true",
        help="table the newest FINISHED run of each cell made by any code (default: only "
        "runs made by this code, its code digest)",
    )
    p_report.add_argument(
        "--reference", default=None, metavar="ROW",
        help="the row the exploratory table's detectable differences are computed against, "
        "at the same dataset and alpha: a method with one row per setting, or a row label as "
        "the table prints it (default: fedavg, else the sweep's first row, said in the "
        "report's header); the families' references are in the sweep file",
    )
    p_report.add_argument(
        "--last-k", type=int, default=None, metavar="K",
        help="recompute the primary endpoint as the mean test accuracy of the last K "
        "evaluations (default: each run's final/accuracy_last_k, its config's last_k)",
    )
    p_report.add_argument(
        "--latex", action="store_true",
        help="also write families.tex (a booktabs table per family and setting that fits a "
        "two-column paper's column; without families, an exploratory one per setting) and "
        "statistics.md (the paper checklist's statistics paragraph)",
    )
    p_report.set_defaults(func=cmd_report)
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
    p_claims = sub.add_parser(
        "claims", help="check the seed papers' claims on small offline experiments",
        epilog="Overrides: seeds=[0,1] or any experiment key, e.g. rounds=5.",
    )
    p_claims.add_argument("items", nargs="*", metavar="[CLAIMS.yaml] [KEY=VALUE ...]",
                          help="claims file (default: configs/claims.yaml) and overrides")
    p_claims.add_argument("--out", help="also write the Markdown table to this file")
    p_claims.add_argument("--record", action="store_true",
                          help="add the file's new claims to its record (<file>.record.yaml: "
                          "the date and digest each was fixed with) and run nothing")
    p_claims.set_defaults(func=cmd_claims)
    p_ui = sub.add_parser(
        "ui", help="the MLflow UI on this project's store (prints the training-view link)",
        description="Serve the MLflow store of mlflow.yml (or MLFLOW_TRACKING_URI) with "
        "`mlflow ui` until Ctrl-C, and print the link that opens the runs in MLflow's training "
        "view. With an MLflow server as tracking URI, only print the link.",
    )
    p_ui.add_argument("--host", default=None,
                      help="address to listen on (default: ui_url's in mlflow.yml, 127.0.0.1)")
    p_ui.add_argument("--port", type=int, default=None,
                      help="port (default: ui_url's in mlflow.yml, 5000)")
    p_ui.set_defaults(func=cmd_ui)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; KEY=VALUE overrides may also follow the options
    (``fedcore sweep main.yaml --workers 3 rounds=5``), which argparse alone refuses."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    target = next((n for n in ("overrides", "items") if hasattr(args, n)), None)
    if extra and (target is None or any(x.startswith("-") or "=" not in x for x in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra and target is not None:
        setattr(args, target, [*getattr(args, target), *extra])
    return args


def main(argv: list[str] | None = None) -> int:
    atexit.unregister(_skip_final_collection)  # once, however often main runs in a process
    atexit.register(_skip_final_collection)  # registered first among fedcore's: runs last
    args = parse(argv)
    try:
        with stopping.installed() if args.command in RESUME else nullcontext():
            code = _call(args)
    except stopping.StopRequested:
        code = 1
    if stopping.requested() and code == 0:  # it came after the work was done (the last round)
        print(f"fedcore: {stopping.signal_name()} received after the {args.command} had "
              "finished; nothing to resume", file=sys.stderr)
        return 0
    if stopping.requested():  # whatever the command did since: the stop decides the exit code
        print(f"fedcore: stopped by {stopping.signal_name()}; {RESUME[args.command]}",
              file=sys.stderr)
        return stopping.exit_code()
    return code


# What running the same command again does after a stop (SIGINT / SIGTERM).
RESUME = {
    "run": "run the same command again to resume its MLflow run (from the last checkpoint "
    "with checkpoint_every, else from round 1)",
    "sweep": "run the same command again to resume: finished cells are skipped, stopped ones "
    "resume",
    "tune": "run the same command again to continue the study (stopped trials are FAIL)",
    "claims": "run the same command again to start the claims over",
}


def _call(args: argparse.Namespace) -> int:
    """Run the command; one-line errors (exit code 2: bad input or a missing extra, 1: a
    failure)."""
    try:
        if args.command != "run":
            from fedcore.runtime_env.extras import require

            require(args.command)
        _check_tracking_server(args.command)
        code: int = args.func(args)
        return code
    except ConfigError as exc:
        print(f"fedcore: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if stopping.requested():  # the stop's consequence (e.g. a Cancelled flow run)
            return 1
        from fedcore.core.data.datasets import DatasetUnavailableError

        if isinstance(exc, DatasetUnavailableError):
            print(f"fedcore: error: {exc}", file=sys.stderr)
            return 2
        if args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        print(f"fedcore: error: {failure_line(exc)} (traceback: --debug or {DEBUG_ENV}=1)",
              file=sys.stderr)
        return 1


TRACKED = ("run", "sweep", "tune", "report", "ui", "claims")  # commands that reach MLflow


def _check_tracking_server(command: str) -> None:
    """Before a command that uses MLflow does anything: its tracking server answers (one line
    within seconds if not), and MLflow's HTTP retries are bounded (fedcore.tracking.reach)."""
    from fedcore.runtime_env.extras import missing

    if command not in TRACKED or missing(("mlflow",)):
        return
    from fedcore.tracking.reach import bound_http_retries, check_server, hide_credentials
    from fedcore.tracking.settings import load_settings

    uri = load_settings().tracking_uri
    bound_http_retries()
    hide_credentials(uri)
    check_server(uri)


def failure_line(exc: BaseException) -> str:
    """``run <id> failed after round <r>: <Type>: <first line>`` (run and round where known);
    a ``user:password@`` in a URL of the message is left out."""
    first = re.sub(r"(\b[a-z][a-z0-9+.-]*://)[^/@\s]*@", r"\1",
                   (str(exc).strip().splitlines() or [""])[0])
    cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    cause = getattr(exc, "fedcore_cause", None) or cause  # e.g. a full disk under the store
    run_id = getattr(exc, "fedcore_run_id", None)
    if run_id is None:
        return cause
    return f"run {run_id} failed after round {getattr(exc, 'fedcore_round', '?')}: {cause}"

