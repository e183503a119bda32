"""``fedcore claims``: check the seed papers' claims, or record new ones."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedcore.cli.common import split_args
from fedcore.core.config import parse_overrides


def cmd_claims(args: argparse.Namespace) -> int:
    """Run the claims file's experiments and print their table (``--record``: record it)."""
    from fedcore.core.config import config_dir
    from fedcore.report.claims import markdown, tally
    from fedcore.specs.claims import load_claims

    path, overrides = split_args(args.items)
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


def add_claims(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``claims`` command's parser."""
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
