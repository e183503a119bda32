"""``fedcore sweep``: check a sweep, run its cells through the Prefect flow, and report it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.cli.common import EPILOG, print_table, store_helper
from fedcore.cli.report import write_report
from fedcore.core.config import ConfigError, parse_overrides

if TYPE_CHECKING:
    from fedcore.specs.sweep import SweepSpec
    from fedcore.tracking.store_setup import StoreHelper


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run the sweep's cells, print their table and, with ``--report``, write its report."""
    for flag, given in (("--latex", args.latex), ("--reference", args.reference)):
        if given and not args.report:
            print(f"fedcore: error: {flag}: needs --report (it is an option of the report)",
                  file=sys.stderr)
            return 2
    helper = store_helper()  # imports MLflow meanwhile; writes only once the input is valid
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


def add_sweep(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``sweep`` command's parser."""
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
