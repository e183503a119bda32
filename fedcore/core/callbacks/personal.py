"""Personal-model evaluation, a callback that a personalised client objective contributes: each
client's own model on its local test split (``personal_accuracy``), its spread over clients
(``personal/*``) and, at the run's end, ``final/personal_*``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.core.callbacks.evaluation import run_held_out, tested_clients
from fedcore.core.metrics import fairness_summary, per_sample_eval
from fedcore.core.models.layout import load_flat_params

if TYPE_CHECKING:
    import torch

    from fedcore.core.records.run import Result, RunView


class Personalised(Protocol):
    def personal_params(
        self, state: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """A client's personal (flat params, buffers) from its state; None: none yet."""


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "client": {"personal_accuracy": "accuracy of the client's personal model on its test split"},
    "round": {
        "personal/accuracy_mean": (
            "personalised methods (Ditto): mean accuracy of the clients' personal models"
        ),
        "personal/accuracy_std": "personal models: std of the accuracies",
        "personal/accuracy_worst10": "personal models: worst-10 % mean",
        "personal/accuracy_best10": "personal models: best-10 % mean",
        "personal/jain_index": "personal models: Jain's index",
    },
    "summary": {
        "final/personal_accuracy_mean": (
            "personalised methods: personal/accuracy_mean at the last evaluation"
        ),
        "final/personal_accuracy_worst10": (
            "personalised methods: personal/accuracy_worst10 at the last evaluation"
        ),
        "final/personal_accuracy_std": (
            "personalised methods: personal/accuracy_std at the last evaluation"
        ),
        "final/personal_jain": "personalised methods: personal/jain_index at the last evaluation",
    },
}


class PersonalEvaluation(Callback):
    """On evaluation rounds (those with a per-client table), after the global evaluation."""

    def __init__(self, objective: Personalised) -> None:
        self.objective = objective

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        if record.clients is None:
            return None
        acc = self.accuracy(record.run)
        tested = tested_clients(record.run.data, run_held_out(record.run))
        metrics = fairness_summary(acc[tested], "personal")
        return RoundVerdict(metrics=metrics, columns={"personal_accuracy": acc})

    def accuracy(self, run: RunView) -> np.ndarray:
        """Each client's personal model on its local test split (the global model for a client
        that has not trained yet; NaN without a test split). The model holds the global
        parameters afterwards."""
        acc = np.full(run.data.num_clients, np.nan)
        model = run.model
        for c in run.data.clients:
            own = self.objective.personal_params(run.store[c.client_id])
            params, buffers = own if own is not None else (run.params, run.buffers)
            load_flat_params(model, params)
            if buffers:
                model.load_state_dict(dict(buffers), strict=False)
            if len(c.y_test):
                correct = per_sample_eval(model, c.x_test, c.y_test)[0]
                acc[c.client_id] = float(correct.double().mean())
        load_flat_params(model, run.params)
        if run.buffers:
            model.load_state_dict(dict(run.buffers), strict=False)
        return acc

    def on_run_end(self, result: Result) -> Mapping[str, float] | None:
        evals = [h for h in result.history if "personal/accuracy_mean" in h]
        return personal_summary(evals[-1]) if evals else None


def personal_summary(last: dict[str, float]) -> dict[str, float]:
    """final/personal_*: the personal models at the last evaluation (mean, worst-10 %, std over
    clients and Jain's index)."""
    return {
        "final/personal_accuracy_mean": last["personal/accuracy_mean"],
        "final/personal_accuracy_worst10": last["personal/accuracy_worst10"],
        "final/personal_accuracy_std": last["personal/accuracy_std"],
        "final/personal_jain": last["personal/jain_index"],
    }
