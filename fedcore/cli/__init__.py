"""The fedcore command line: run one simulation, a sweep, a sweep's report, an Optuna study,
or the MLflow UI."""

from __future__ import annotations

import argparse
import atexit
import gc
import sys
from contextlib import nullcontext

from fedcore.cli.claims import add_claims
from fedcore.cli.common import EPILOG
from fedcore.cli.failures import DEBUG_ENV, call
from fedcore.cli.report import add_report
from fedcore.cli.run import add_run
from fedcore.cli.sweep import add_sweep
from fedcore.cli.tune import add_tune
from fedcore.cli.ui import add_ui
from fedcore.core.runtime import stopping


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
    for add in (add_run, add_sweep, add_report, add_tune, add_claims, add_ui):
        add(sub)
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
    """Run the ``fedcore`` command line ``argv``; its exit code (what a stop decides)."""
    atexit.unregister(_skip_final_collection)  # once, however often main runs in a process
    atexit.register(_skip_final_collection)  # registered first among fedcore's: runs last
    args = parse(argv)
    try:
        with stopping.installed() if args.command in RESUME else nullcontext():
            code = call(args)
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
