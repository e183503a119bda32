"""The built-in evaluation: the global model on the global test set, the validation set and
every client's local test split, every ``eval_every`` rounds and at the last round. With clients
held out of training (``dataset.holdout_clients``), ``clients/*`` cover the training clients and
``unseen/*`` the held-out ones.

``evaluate`` is a function of (model, parameters, data); ``Evaluation`` is the callback
that calls it on the run's view and builds the round's per-client table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.core.data.holdout import classes_missing, data_class_counts
from fedcore.core.metrics import (
    decile_mean,
    eval_with_embeddings,
    fairness_summary,
    label_mix_accuracy,
    per_sample_eval,
    representation_stats,
)
from fedcore.core.models.layout import load_flat_params
from fedcore.core.models.protocol import REPR_METRICS
from fedcore.core.records.client_table import ClientTable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fedcore.core.data.federated import FederatedData
    from fedcore.core.models import FedModel
    from fedcore.core.records.run import Result, RunView


@dataclass(frozen=True)
class ClientTests:
    """Every client's local test split stacked: samples, labels and the owning client."""

    x: torch.Tensor
    y: torch.Tensor
    owner: torch.Tensor


def client_tests(data: FederatedData) -> ClientTests:
    """The clients' local test splits of ``data`` as one stacked set."""
    cs = data.clients
    return ClientTests(
        torch.cat([c.x_test for c in cs]),
        torch.cat([c.y_test for c in cs]),
        torch.cat([torch.full((len(c.y_test),), c.client_id, dtype=torch.long) for c in cs]),
    )


@dataclass
class Evaluated:
    """What ``evaluate`` measured: the round's metrics and each client's accuracy and
    loss (by client id), and which clients have a local test split."""

    metrics: dict[str, float]
    accuracy: np.ndarray
    loss: np.ndarray
    has_test: np.ndarray


# The overrides of a tiny run that emits these metrics (fedcore.core.metrics.catalogue).
EMITTED_WHEN = ["dataset.val_fraction=0.2", "dataset.holdout_clients=0.34"]

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "client": {
        "noisy": "1 for a client whose training labels are flipped (clients.noisy_fraction)",
        "byzantine": "1 for a Byzantine client (clients.byzantine_fraction)",
        "held_out": "1 for a client held out of training (dataset.holdout_clients)",
    },
    "round": {
        "test/accuracy": "accuracy of the global model on the global test set",
        "test/loss": "mean cross-entropy of the global model on the global test set",
        "val/accuracy": (
            "accuracy of the global model on the validation set (dataset.val_fraction of the global"
            " test split, held out of it; only when val_fraction > 0)"
        ),
        "val/loss": "mean cross-entropy of the global model on the validation set",
        "unseen/accuracy": (
            "with dataset.holdout_clients: accuracy of the global model on the held-out clients' "
            "local test splits pooled (each client weighted by its test size; clients never "
            "sampled for training); clients/* then cover the training clients only"
        ),
        "unseen/accuracy_worst10": (
            "mean accuracy of the worst 10 % of held-out clients (at least one client)"
        ),
        "unseen/clients": "held-out clients measured (those with a local test split)",
        "unseen/samples": (
            "test samples behind unseen/accuracy: the held-out clients' local test splits (no "
            "local splits: the global test set their label mixes weight)"
        ),
        "unseen/participation_gap": (
            "accuracy of the training clients' local test splits pooled (weighted by test size) "
            "minus unseen/accuracy: how much better the global model does on clients that could "
            "train than on clients that never did"
        ),
    },
    "summary": {
        "data/classes_missing_from_training": (
            "classes with training samples on some client but on no training client (the "
            "held-out clients are stratified so that this is 0; 0 without a holdout)"
        ),
    },
}


def evaluate(
    model: FedModel,
    params: torch.Tensor,
    data: FederatedData,
    buffers: Mapping[str, torch.Tensor] | None = None,
    tests: ClientTests | None = None,
    representation: bool = True,
    held_out: np.ndarray | None = None,
) -> Evaluated:
    """``params`` (and ``buffers``) loaded into ``model``, on the global test set, on the
    validation set (when ``dataset.val_fraction`` holds one out) and on every client's local
    test split (none, ``test_fraction`` 0: the global per-class accuracy weighted by each
    client's label mix); ``representation``: also the ``repr/*`` statistics of the model's
    embeddings; ``held_out``: the ids of clients that never train (``unseen/*``). The model
    holds ``params`` afterwards."""
    load_flat_params(model, params)
    if buffers:
        model.load_state_dict(dict(buffers), strict=False)
    if representation:
        correct, loss, z = eval_with_embeddings(model, data.x_test, data.y_test)
    else:
        correct, loss = per_sample_eval(model, data.x_test, data.y_test)
    metrics = {"test/accuracy": float(correct.float().mean()), "test/loss": float(loss.mean())}
    if data.x_val is not None and data.y_val is not None:  # dataset.val_fraction > 0
        v_correct, v_loss = per_sample_eval(model, data.x_val, data.y_val)
        metrics.update({"val/accuracy": float(v_correct.float().mean()),
                        "val/loss": float(v_loss.mean())})
    if representation:
        metrics.update(representation_stats(z, data.y_test))
    n_clients = data.num_clients
    has_test = np.array([len(c.y_test) > 0 for c in data.clients])
    local = bool(has_test.any())
    if local:
        tests = tests if tests is not None else client_tests(data)
        c_correct, c_loss = per_sample_eval(model, tests.x, tests.y)
        owner = tests.owner.to(c_correct.device)
        counts = torch.bincount(owner, minlength=n_clients).clamp_min(1).double()
        acc = (torch.bincount(owner, c_correct.double(), minlength=n_clients) / counts).cpu()
        cl = (torch.bincount(owner, c_loss.double(), minlength=n_clients) / counts).cpu()
    else:  # no local test splits (test_fraction 0): the global test set by label mix
        mix = data.label_mix()
        acc, cl = (t.cpu() for t in label_mix_accuracy(correct, loss, data.y_test, mix))
        has_test = np.ones(n_clients, dtype=bool)
    acc_np = acc.numpy()
    held = np.isin(np.arange(n_clients), held_out if held_out is not None else [])
    metrics.update(fairness_summary(acc_np[has_test & ~held]))
    if held.any():
        sizes = (np.array([len(c.y_test) for c in data.clients], dtype=float)
                 if local else np.full(n_clients, float(len(data.y_test))))
        train, unseen = has_test & ~held, has_test & held
        metrics.update(unseen_metrics(acc_np[unseen], sizes[unseen],
                                      _weighted(acc_np[train], sizes[train])))
    return Evaluated(metrics, acc_np, cl.numpy(), has_test)


def _weighted(acc: np.ndarray, sizes: np.ndarray) -> float:
    """Accuracy of clients pooled: their accuracies weighted by their test sizes."""
    total = float(sizes.sum())
    return float(np.dot(acc, sizes) / total) if total > 0 else float(np.mean(acc))


def unseen_metrics(acc: np.ndarray, sizes: np.ndarray, participating: float) -> dict[str, float]:
    """``unseen/*`` from the held-out clients' accuracies ``acc`` and test sizes ``sizes`` (one
    per client with a local test split; empty: none measured): their pooled accuracy (weighted
    by test size), their worst-10 % mean, how many clients and samples, and the participation
    gap, ``participating`` (the training clients' pooled accuracy) minus the pooled accuracy."""
    if not len(acc):
        return {}
    mean = _weighted(acc, sizes)
    return {
        "unseen/accuracy": mean,
        "unseen/accuracy_worst10": decile_mean(acc, worst=True),
        "unseen/clients": float(len(acc)),
        "unseen/samples": float(sizes.sum()),
        "unseen/participation_gap": participating - mean,
    }


def run_held_out(run: RunView) -> np.ndarray:
    """The ids of the run's clients held out of training (drawn from the partition seed)."""
    return run.held_out


def evaluate_run(
    run: RunView,
    round: int,
    sampled: np.ndarray,
    client_values: Mapping[str, np.ndarray] | None = None,
    tests: ClientTests | None = None,
) -> tuple[dict[str, float], ClientTable]:
    """The rule's evaluation point (``run.eval_params()``) evaluated, and the round's
    per-client table. The model holds the global parameters afterwards."""
    params = run.eval_params()
    data = run.data
    held_out = run_held_out(run)
    out = evaluate(run.model, params, data, run.buffers, tests,
                   representation=REPR_METRICS not in run.skipped_metrics, held_out=held_out)
    if params is not run.params:
        load_flat_params(run.model, run.params)
    n_clients = data.num_clients
    table = ClientTable(
        round=round,
        client_id=np.arange(n_clients),
        accuracy=out.accuracy,
        loss=out.loss,
        num_samples=np.array([c.num_train for c in data.clients]),
        sampled=np.isin(np.arange(n_clients), sampled),
        extra={
            "noisy": np.isin(np.arange(n_clients), data.noisy_clients),
            "byzantine": np.isin(np.arange(n_clients), sorted(run.byzantine)),
            **({"held_out": np.isin(np.arange(n_clients), held_out)} if len(held_out) else {}),
            **(client_values or {}),
        },
    )
    return out.metrics, table


class Evaluation(Callback):
    """Evaluates on rounds ``eval_every``, 2 ``eval_every``, ... and the last one: its metrics
    (``test/*``, ``val/*``, ``clients/*``, ``repr/*``) and the round's per-client table."""

    def __init__(self) -> None:
        self._tests: tuple[FederatedData, ClientTests] | None = None
        self._missing: int | None = None

    def tests(self, data: FederatedData) -> ClientTests:
        """The stacked client test splits of ``data`` (made once per run's data)."""
        if self._tests is None or self._tests[0] is not data:
            self._tests = (data, client_tests(data))
        return self._tests[1]

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        run = record.run
        if record.round % run.cfg.eval_every and not record.last:
            return None
        if self._missing is None:
            self._missing = classes_missing(data_class_counts(run.data), run.held_out)
        metrics, table = evaluate_run(run, record.round, record.sampled, record.client_values,
                                      self.tests(run.data))
        return RoundVerdict(metrics=metrics, clients=table)

    def on_run_end(self, result: Result) -> Mapping[str, float] | None:
        """``data/classes_missing_from_training`` (once an evaluation has seen the data)."""
        if self._missing is None:
            return None
        return {"data/classes_missing_from_training": float(self._missing)}


def tested_clients(data: FederatedData, held_out: np.ndarray | None = None) -> np.ndarray:
    """Which clients the per-client summaries cover: the training clients (none in
    ``held_out``) with a local test split, or all training clients when no client has one
    (then the table holds the label-mix accuracies)."""
    has_test = np.array([len(c.y_test) > 0 for c in data.clients])
    tested = has_test if has_test.any() else np.ones(len(has_test), dtype=bool)
    return tested & ~np.isin(np.arange(len(has_test)), held_out if held_out is not None else [])
