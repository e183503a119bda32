"""The built-in summary: the run's ``final/*``, ``auc/*`` and ``rounds_to_target`` metrics from
its evaluated rounds, computed at the run's end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from fedcore.core.callbacks.base import Callback

if TYPE_CHECKING:
    from fedcore.core.records.run import Result


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "summary": {
        "final/accuracy": "test/accuracy at the last evaluated round",
        "final/loss": "test/loss at the last evaluated round",
        "final/accuracy_worst10": "clients/accuracy_worst10 at the last evaluation",
        "final/accuracy_std": "clients/accuracy_std at the last evaluation",
        "final/accuracy_mean_clients": "clients/accuracy_mean at the last evaluation",
        "final/unseen_accuracy": "unseen/accuracy at the last evaluation",
        "final/unseen_accuracy_worst10": "unseen/accuracy_worst10 at the last evaluation",
        "final/participation_gap": "unseen/participation_gap at the last evaluation",
        "final/unseen_clients": "unseen/clients at the last evaluation",
        "final/unseen_samples": "unseen/samples at the last evaluation",
        "final/val_accuracy": "val/accuracy at the last evaluation (dataset.val_fraction > 0)",
        "final/val_loss": "val/loss at the last evaluation (dataset.val_fraction > 0)",
        "final/accuracy_last_k": (
            "mean test accuracy of the last last_k evaluations (fewer if fewer were made): the "
            "default primary endpoint of a comparison family"
        ),
        "auc/accuracy": "mean test accuracy over the evaluated rounds",
        "auc/accuracy_trapz": (
            "FedOUI's AUC: trapz(accuracy) / (R - 1) over the R evaluated rounds (R = 1: the one "
            "accuracy)"
        ),
        "rounds_to_target": (
            "first evaluated round whose test accuracy reached target_accuracy (absent if never)"
        ),
        "time_to_target_s": (
            "time/simulated_s at the end of that round (runs with a simulated clock)"
        ),
    },
}


# summary metric -> the metric of the last evaluated round it is
FINAL = {
    "final/accuracy": "test/accuracy",
    "final/loss": "test/loss",
    "final/accuracy_worst10": "clients/accuracy_worst10",
    "final/accuracy_std": "clients/accuracy_std",
    "final/accuracy_mean_clients": "clients/accuracy_mean",
    "final/unseen_accuracy": "unseen/accuracy",
    "final/unseen_accuracy_worst10": "unseen/accuracy_worst10",
    "final/participation_gap": "unseen/participation_gap",
    "final/unseen_clients": "unseen/clients",
    "final/unseen_samples": "unseen/samples",
    "final/val_accuracy": "val/accuracy",
    "final/val_loss": "val/loss",
}


class Summary(Callback):
    """``result.summary`` from the evaluated rounds played (empty when none was evaluated)."""

    def __init__(self, target_accuracy: float | None = None, last_k: int = 5) -> None:
        self.target_accuracy = target_accuracy
        self.last_k = last_k

    def on_run_end(self, result: Result) -> Mapping[str, float] | None:
        return summarize(result.history, self.target_accuracy, self.last_k)


def auc_trapz(accuracy: list[float]) -> float:
    """FedOUI's AUC: trapz(acc) / (R - 1) over the R evaluated accuracies (unit spacing), the
    area under the curve over its span; the one accuracy itself when R = 1."""
    if len(accuracy) == 1:
        return float(accuracy[0])
    a = np.asarray(accuracy, dtype=float)
    return float(np.sum((a[1:] + a[:-1]) / 2) / (len(a) - 1))


def summarize(history: list[dict[str, float]], target: float | None,
              last_k: int = 5) -> dict[str, float]:
    """The last evaluation's accuracy, loss and client spread (those it measured), the mean
    accuracy of the last ``last_k`` evaluations (fewer when fewer were made), the accuracy's mean
    and trapezoid AUC over the evaluations, and the first round reaching ``target``; empty
    without an evaluated round."""
    evals = [h for h in history if "test/accuracy" in h]
    if not evals:
        return {}
    last = evals[-1]
    out = {name: last[key] for name, key in FINAL.items() if key in last}
    out["final/accuracy_last_k"] = float(np.mean([h["test/accuracy"] for h in evals[-last_k:]]))
    out["auc/accuracy"] = float(np.mean([h["test/accuracy"] for h in evals]))
    out["auc/accuracy_trapz"] = auc_trapz([h["test/accuracy"] for h in evals])
    if target is not None:
        hit = [h for h in evals if h["test/accuracy"] >= target]
        if hit:
            out["rounds_to_target"] = float(hit[0]["round"])
            if "time/simulated_s" in hit[0]:
                out["time_to_target_s"] = float(hit[0]["time/simulated_s"])
    return out
