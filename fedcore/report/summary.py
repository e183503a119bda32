"""The report's summary of a sweep's runs: per row and setting, the seeds finished and failed and
each column's mean over seeds with its 95 % interval (cut to the metric's range), rounds to
target with its censoring, and the training state at the endpoint."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from fedcore.stats.comparison import with_intervals
from fedcore.stats.intervals import DIFFERENCE_RANGE, VALUE_RANGE
from fedcore.stats.training_state import CLIMBING, MIN_CHANGE, NOISE_SE, training_state

GROUP = ["row", "method", "hparams", "tuning", "dataset", "alpha"]
COLUMNS = [
    ("accuracy_last_k", "final/accuracy_last_k", "accuracy, mean of last k"),
    ("accuracy", "final/accuracy", "final accuracy"),
    ("worst10", "final/accuracy_worst10", "worst-10 %"),
    ("client_std", "final/accuracy_std", "client accuracy std"),
    ("jain", "clients/jain_index", "Jain"),
    ("auc", "auc/accuracy", "mean accuracy over evaluations"),
    ("rounds_to_target", "rounds_to_target", "rounds to target"),
    ("gb_sent", "comm/bytes_up_total", "GB sent"),
    # with dataset.holdout_clients: the global model on clients that never trained
    ("unseen_accuracy", "final/unseen_accuracy", "unseen-client accuracy"),
    ("participation_gap", "final/participation_gap", "participation gap"),
    ("unseen_clients", "final/unseen_clients", "unseen clients"),
    ("unseen_samples", "final/unseen_samples", "unseen test samples"),
    # personalised methods (Ditto): their personal models; blank for every other method
    ("personal_accuracy", "final/personal_accuracy_mean", "personal accuracy"),
    ("personal_worst10", "final/personal_accuracy_worst10", "personal worst-10 %"),
    ("personal_std", "final/personal_accuracy_std", "personal std"),
    ("personal_jain", "final/personal_jain", "personal Jain"),
]
PERSONAL = {key for key, metric, _ in COLUMNS if metric.startswith("final/personal_")} | {
    "unseen_accuracy", "participation_gap", "unseen_clients",
    "unseen_samples"}  # blank where a run does not have them


# the range of each bounded column: its intervals are cut to it (docs/explanation/statistics.md)
BOUNDS = {**{key: VALUE_RANGE for key in (
    "accuracy_last_k", "accuracy", "worst10", "jain", "auc", "unseen_accuracy",
    "personal_accuracy", "personal_worst10", "personal_jain")},
    "client_std": (0.0, 0.5), "personal_std": (0.0, 0.5), "participation_gap": DIFFERENCE_RANGE}
DISCRETE = ("accuracy", "worst10", "rounds_to_target")  # steps of 1/|test set|, clients, rounds


def summary_table(runs: pd.DataFrame,
                  per_group: Mapping[str, Callable[[pd.DataFrame], Any]] | None = None
                  ) -> pd.DataFrame:
    """Per row x dataset x alpha (x varied keys): seeds finished and failed, and per column the
    mean over finished seeds with its 95 % t-interval (``<key>_mean``, ``_low``, ``_high``,
    ``_n``); ``reached_target``: the seeds that reached the target; ``per_group``: more
    columns, each a function of a group's runs."""
    keys = group_keys(runs)
    runs = runs.assign(**{k: runs[k].astype(object).where(runs[k].notna(), "")
                          for k in keys if k.startswith("grid:")})  # NaN keys never match
    table = with_intervals(runs, [key for key, _, _ in COLUMNS], keys,  # NaN: failed seeds
                           BOUNDS)
    if table.empty:
        return table
    groups = runs.groupby(keys, sort=False, dropna=False)
    done = {k: int((g["status"] == "FINISHED").sum()) for k, g in groups}
    failed = {k: list(g.loc[g["status"] != "FINISHED", "failure"]) for k, g in groups}
    reached = {k: list(g.loc[g["status"] == "FINISHED", "rounds_to_target"]) for k, g in groups}
    index = [tuple(r) if len(keys) > 1 else r[0] for r in table[keys].itertuples(index=False)]
    table["seeds"] = [done.get(i, 0) for i in index]  # finished seeds
    table["failed"] = [len(failed.get(i, [])) for i in index]
    table["failures"] = ["; ".join(failed.get(i, [])) for i in index]
    table["reached_target"] = [int(np.isfinite(np.asarray(reached.get(i, []), float)).sum())
                               for i in index]
    horizon = {k: int(g["rounds"].max()) for k, g in groups}
    table["target_text"] = [target_text(reached.get(i, []), horizon.get(i, 0)) for i in index]
    for column, of_group in (per_group or {}).items():
        values = {k: of_group(g) for k, g in groups}
        table[column] = [values.get(i) for i in index]
    return table


def with_training_state(table: pd.DataFrame, runs: pd.DataFrame,
                        acc: dict[str, pd.Series]) -> pd.DataFrame:
    """``table`` with each row's training state at its endpoint (``training``: its text,
    ``climbing``: whether it was still climbing), from the finished seeds' test-accuracy
    histories ``acc`` (run id -> accuracy by round) and the endpoint's window ``last_k``."""
    if table.empty:
        return table
    keys = group_keys(runs)
    runs = runs.assign(**{k: runs[k].astype(object).where(runs[k].notna(), "")
                          for k in keys if k.startswith("grid:")})
    states = {}
    for key, g in runs.groupby(keys, sort=False, dropna=False):
        ok = g[g["status"] == "FINISHED"]
        curves = [list(acc[r].to_numpy(dtype=float)) for r in ok["run_id"] if r in acc]
        states[key] = training_state(curves, int(g["last_k"].max()))
    index = [tuple(r) if len(keys) > 1 else r[0] for r in table[keys].itertuples(index=False)]
    found = [states.get(i) for i in index]
    return table.assign(training=["" if st is None else st.text() for st in found],
                        climbing=[st is not None and st.state == CLIMBING for st in found])


def training_header(table: pd.DataFrame) -> str:
    """The header's count of rows still climbing at their endpoint, with the rule."""
    if "climbing" not in table or table.empty:
        return ""
    climbing = int(table["climbing"].sum())
    return (f"**Training state at the endpoint**: {climbing} of {len(table)} rows still "
            f"climbing (mean change of test accuracy between the last two windows of k "
            f"evaluations at least {MIN_CHANGE:g} and above {NOISE_SE:g} standard errors of its "
            "seed-to-seed spread; column `training`)"
            + ("; their endpoint is not the method's plateau." if climbing else ".") + "\n\n")


def target_text(rounds: list[float], horizon: int) -> str:
    """Rounds to target with its censoring: ``median 14 (3/3 reached)``, ``> 20 (1/3 reached)``
    (a seed that never reached the target is censored at the horizon, never left out)."""
    values = np.asarray(rounds, dtype=float)
    n = len(values)
    if n == 0:
        return "—"
    hit = np.sort(values[np.isfinite(values)])
    need = n // 2 + 1 if n % 2 == 0 else (n + 1) // 2  # the seed whose value is the median
    median = f"median {hit[need - 1]:.0f}" if len(hit) >= need else f"> {horizon}"
    return f"{median} ({len(hit)}/{n} reached)"


def group_keys(frame: pd.DataFrame) -> list[str]:
    """row, method, regime, dataset, alpha and any other key the sweep varies (seeds are the
    repetitions within a group)."""
    return [c for c in frame.columns if c in GROUP or c.startswith("grid:")]
