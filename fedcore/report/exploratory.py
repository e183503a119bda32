"""The report's exploratory table: every row's means and intervals on the columns a reader
compares, no verdicts, with the difference to the reference row a paired test could detect."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fedcore.report.ranking import short_training
from fedcore.report.summary import COLUMNS, PERSONAL
from fedcore.stats.comparison import half_width, reference_rows
from fedcore.stats.intervals import DIFFERENCE_RANGE, no_resolution, paired_seeds
from fedcore.stats.paired import detectable_difference

SHOWN = ("accuracy_last_k", "accuracy", "worst10", "rounds_to_target")  # what a reader compares
SHOWN_IF_ANY = ("personal_accuracy", "unseen_accuracy")  # where a row has it


def exploratory_table(table: pd.DataFrame, detectable: dict[tuple[Any, ...], str],
                      epsilon_column: str = "ε (at δ)") -> pd.DataFrame:
    """The exploratory table, narrowed to what a reader compares: per row its setting, regime,
    seeds (finished, failed), the primary endpoint with its 95 % interval, the training state,
    final and worst-10 % accuracy, rounds to target, the detectable difference to the reference
    row (personal and unseen-client accuracy where a row has them, GB sent where rows differ in
    it, the dataset where there are several); no verdicts. Every other column is in
    ``table.csv``."""
    out = table[["row", "hparams"]].rename(columns={"hparams": "regime"})
    if "epsilon_text" in table and (table["epsilon_text"] != "∞").any():  # a private row
        out[epsilon_column] = list(table["epsilon_text"])
    if table["dataset"].nunique() > 1:  # one dataset: named by the ranking's headings
        out["dataset"] = list(table["dataset"])
    out["alpha"] = list(table["alpha"])
    out["seeds"] = [f"{n}" if not f else f"{n} of {n + f} finished; {f} failed: {why}"
                    for n, f, why in zip(table["seeds"], table["failed"], table["failures"],
                                         strict=True)]
    sent = table["gb_sent_mean"].dropna()
    shown = [*SHOWN, *(k for k in SHOWN_IF_ANY if table[f"{k}_mean"].notna().any())]
    if len(sent) > 1 and sent.max() > 1.01 * sent.min():  # compressed and uncompressed rows
        shown.append("gb_sent")
    fmt = {"gb_sent": ".4g"}
    for key, _, label in COLUMNS:
        if key not in shown:
            continue
        if key == "rounds_to_target":
            out[label] = list(table["target_text"])
            continue
        f = fmt.get(key, ".4f")
        out[label] = [
            "" if key in PERSONAL and np.isnan(m) else half_width(m, lo, hi, n, f, ok)
            for m, lo, hi, n, ok in zip(table[f"{key}_mean"], table[f"{key}_low"],
                                        table[f"{key}_high"], table[f"{key}_n"],
                                        table[f"{key}_resolved"], strict=True)
        ]
        if key == "accuracy_last_k" and "training" in table:
            out["training at the endpoint"] = [short_training(str(s)) for s in table["training"]]
    out["detectable Δ vs ref"] = [
        detectable.get((d, a, r), "") for d, a, r in
        zip(table["dataset"], table["alpha"], table["row"], strict=True)]
    return out


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table of ``frame`` (no index)."""
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def detectable_vs_reference(runs: pd.DataFrame, reference: str) -> dict[tuple[Any, ...], str]:
    """Per row: the smallest difference to the reference row of its setting that a paired t-test
    at 5 % detects with 80 % power at the row's seeds (from the observed paired spread of the
    primary endpoint); the exploratory table's resolution, not a test."""
    out: dict[tuple[Any, ...], str] = {}
    ok = runs[runs["status"] == "FINISHED"]
    refs = reference_rows(ok, reference)
    for (dataset, alpha), sub in ok.groupby(["dataset", "alpha"], sort=False):
        ref = refs.get((dataset, alpha))
        if ref is None:
            continue
        theirs = dict(zip(sub.loc[sub["row"] == ref, "seed"],
                          sub.loc[sub["row"] == ref, "accuracy_last_k"], strict=True))
        for row, g in sub.groupby("row", sort=False):
            if row == ref:
                out[(dataset, alpha, row)] = "reference"
                continue
            _, mine, ref_values = paired_seeds(dict(zip(g["seed"], g["accuracy_last_k"],
                                                        strict=True)), theirs)
            diffs = np.subtract(mine, ref_values)
            if len(diffs) < 2:
                continue
            d = detectable_difference(float(np.std(diffs, ddof=1)), len(diffs), 0.05)
            half = (DIFFERENCE_RANGE[1] - DIFFERENCE_RANGE[0]) / 2
            out[(dataset, alpha, row)] = ("" if not np.isfinite(d) else f"±{d:.3f}" if d < half
                                          else no_resolution(len(diffs)))
    return out
