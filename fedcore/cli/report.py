"""``fedcore report``: a sweep's comparison table, plots and headline verdicts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fedcore.cli.common import EPILOG
from fedcore.core.config import parse_overrides

if TYPE_CHECKING:
    from fedcore.specs.sweep import SweepSpec


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report of the sweep file's finished runs."""
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


def add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``report`` command's parser."""
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
