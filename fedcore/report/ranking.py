"""The report's ranking per setting: for each setting (dataset, Dirichlet alpha, protocol and any
other setting the sweep varies), its rows ordered by the primary endpoint's mean over seeds,
with the seeds it counts, its 95 % interval and the training state at the endpoint.

An order of means, not a test: the families' verdicts are the tests.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fedcore.specs.rows import TUNABLE
from fedcore.stats.intervals import no_resolution

SETTING = ("dataset", "alpha", "protocol")  # setting columns of a report's summary table


def short_training(text: str) -> str:
    """``climbing (+0.052 ± 0.010)`` from a training state's text (the rule is in the
    report's explanation)."""
    return text.split(" between ")[0] + ")" if " between " in text else text


def setting_columns(table: pd.DataFrame) -> list[str]:
    """The columns that tell one setting from another: dataset, alpha, protocol (where the
    table has it) and each varied key that is not a method's or the local optimiser's own
    (``grid:rounds`` is a setting, ``grid:method.mu`` is part of the row)."""
    return [c for c in table.columns if c in SETTING or (
        c.startswith("grid:") and not c.removeprefix("grid:").startswith(TUNABLE))]


def setting_title(columns: list[str], values: tuple[Any, ...]) -> str:
    """``digits, Dirichlet 0.1, rounds=20`` (a blank varied key, one some cells do not set,
    left out)."""
    parts = []
    for column, value in zip(columns, values, strict=True):
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            continue
        if column == "alpha":
            parts.append(f"Dirichlet {value:g}" if isinstance(value, float) else
                         f"Dirichlet {value}")
        elif column == "dataset":
            parts.append(str(value))
        else:
            parts.append(f"{column.removeprefix('grid:')}={value}")
    return ", ".join(parts) or "all rows"


def _interval(low: float, high: float, n: int, resolved: bool) -> str:
    if n < 2 or math.isnan(low) or math.isnan(high):
        return "—"
    if not resolved:
        return no_resolution(n)
    return f"[{low:.4f}, {high:.4f}]"


def ranking_table(table: pd.DataFrame, endpoint: str, higher: bool = True) -> list[str]:
    """The Markdown lines of one setting's ranking: ``table``'s rows (a report summary:
    ``row``, ``hparams``, ``seeds``, ``failed``, ``<endpoint>_mean``, ``_low``, ``_high``,
    ``_n``, ``_resolved``, optionally ``training``) best first, rows without a value last;
    equal means share a place."""
    mean = table[f"{endpoint}_mean"].astype(float)
    order = table.assign(_m=mean).sort_values("_m", ascending=not higher, kind="stable",
                                              na_position="last")
    places = order["_m"].rank(method="min", ascending=not higher)
    lines = ["| # | row | regime | n | endpoint (mean) | 95 % interval | training |",
             "|---:|---|---|---:|---:|---|---|"]
    for (_, r), place in zip(order.iterrows(), places, strict=True):
        m = float(r["_m"])
        n = int(r[f"{endpoint}_n"])
        failed = int(r.get("failed", 0) or 0)
        seeds = f"{n}" + (f" (+{failed} failed)" if failed else "")
        resolved = bool(r.get(f"{endpoint}_resolved", True))
        lines.append(
            f"| {'—' if math.isnan(place) else int(place)} | {r['row']} | {r['hparams']} | "
            f"{seeds} | {'—' if math.isnan(m) else f'{m:.4f}'} | "
            f"{_interval(float(r[f'{endpoint}_low']), float(r[f'{endpoint}_high']), n, resolved)}"
            f" | {short_training(str(r.get('training', '')))} |")
    return lines


def ranking_markdown(table: pd.DataFrame, endpoint: str, endpoint_words: str,
                     higher: bool = True) -> str:
    """The "Ranking per setting" section: one table per setting of ``table`` (a report
    summary), its rows ordered by ``endpoint`` (a column key, described by
    ``endpoint_words``); "" for an empty table."""
    if table.empty:
        return ""
    columns = setting_columns(table)
    keyed = table.assign(**{c: table[c].astype(object).where(table[c].notna(), "")
                            for c in columns})
    parts = ["## Ranking per setting", "",
             f"The rows of each setting ordered by the primary endpoint, {endpoint_words} "
             f"({'highest' if higher else 'lowest'} mean over seeds first). n: the seeds with a "
             "value (a failed seed has none); the interval is the 95 % Student-t interval of "
             "the mean. An order of means, not a test: rows whose intervals overlap are not "
             "told apart here (a family's verdicts, where the sweep declares families, are "
             "the tests)."]
    for values, sub in keyed.groupby(columns, sort=False, dropna=False):
        key = values if isinstance(values, tuple) else (values,)
        parts += ["", f"### {setting_title(columns, key)}", "",
                  *ranking_table(sub, endpoint, higher)]
    return "\n".join(parts) + "\n"
