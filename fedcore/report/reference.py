"""The reference row of a report's exploratory table, and the error of a report that what was
asked for cannot give."""

from __future__ import annotations

import pandas as pd

from fedcore.stats.comparison import reference_rows

DEFAULT_REFERENCE = "fedavg"


class ReportInputError(LookupError):
    """A report that what was asked for cannot give: no finished run, or a reference that
    matches no row (the command line's exit code 2)."""


def resolve_reference(finished: pd.DataFrame, reference: str | None,
                      sweep: str) -> tuple[str, str]:
    """The reference row of the exploratory table and the header's line on it ("" unless it
    is the first row by default): ``reference`` when it matches a row of ``finished``, else
    (None) ``fedavg`` when it does, else the sweep's first row."""
    rows = list(dict.fromkeys(finished["row"].astype(str)))
    if reference is not None:
        if not reference_rows(finished, reference):
            raise ReportInputError(
                f"reference {reference!r} matches no row of sweep {sweep!r} (a method with "
                f"one row per setting, or a row label); rows: {', '.join(rows)}")
        return reference, ""
    if reference_rows(finished, DEFAULT_REFERENCE):
        return DEFAULT_REFERENCE, ""
    return rows[0], (f"**Reference row**: `{rows[0]}`, the sweep's first row (it has no "
                     f"`{DEFAULT_REFERENCE}` row; `--reference ROW` picks another).\n\n")
