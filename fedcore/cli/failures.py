"""Running a command: its errors as one line and their exit codes, and the tracking server
checked first."""

from __future__ import annotations

import argparse
import os
import re
import sys

from fedcore.core.config import ConfigError
from fedcore.core.runtime import stopping

DEBUG_ENV = "FEDCORE_DEBUG"  # set to 1: failures show their traceback (as --debug)
TRACKED = ("run", "sweep", "tune", "report", "ui", "claims")  # commands that reach MLflow


# The commands that simulate in this process: torch's thread count is pinned first.
SIMULATING = frozenset({"run", "sweep", "tune", "claims"})


def call(args: argparse.Namespace) -> int:
    """Run the command; one-line errors (exit code 2: bad input or a missing extra, 1: a
    failure)."""
    try:
        if args.command != "run":
            from fedcore.runtime_env.extras import require

            require(args.command)
        if args.command in SIMULATING:  # before any data is built (its reductions too)
            from fedcore.runtime_env.env import pin_torch_threads

            pin_torch_threads()
        check_tracking_server(args.command)
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


def check_tracking_server(command: str) -> None:
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
