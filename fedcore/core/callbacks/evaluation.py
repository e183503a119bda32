"""The built-in evaluation: the global model on the global test set, the validation set and
every client's local test split, every ``eval_every`` rounds and at the last round. With clients
held out of training (``dataset.holdout_clients``), ``clients/*`` cover the training clients and
``unseen/*`` the held-out ones.

:func:`evaluate` is a function of (model, parameters, data); :class:`Evaluation` is the callback
that calls it on the run's view and builds the round's per-client table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.core.data.holdout import held_out_clients
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
    from fedcore.core.records import RunView


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
    """What :func:`evaluate` measured: the round's metrics and each client's accuracy and
    loss (by client id), and which clients have a local test split."""

    metrics: dict[str, float]
    accuracy: np.ndarray
    loss: np.ndarray
    has_test: np.ndarray


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "test/accuracy": "accuracy of the global model on the global test set",
        "test/loss": "mean cross-entropy of the global model on the global test set",
        "val/accuracy": (
            "accuracy of the global model on the validation set (dataset.val_fraction of the global"
            " test split, held out of it; only when val_fraction > 0)"
        ),
        "val/loss": "mean cross-entropy of the global model on the validation set",
        "unseen/accuracy": (
            "with dataset.holdout_clients: mean over the held-out clients (never sampled for "
            "training) of the global model's accuracy on each one's local test split; clients/* "
            "then cover the training clients only"
        ),
        "unseen/accuracy_worst10": (
            "mean accuracy of the worst 10 % of held-out clients (at least one client)"
        ),
        "unseen/participation_gap": (
            "clients/accuracy_mean (training clients) minus unseen/accuracy: how much better the "
            "global model does on clients that could train than on clients that never did"
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
    if has_test.any():
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
        metrics.update(unseen_metrics(acc_np[has_test & held], metrics["clients/accuracy_mean"]))
    return Evaluated(metrics, acc_np, cl.numpy(), has_test)


def unseen_metrics(acc: np.ndarray, participating: float) -> dict[str, float]:
    """``unseen/*`` from the held-out clients' accuracies ``acc`` (one per client with a local
    test split; empty: none measured): their mean, their worst-10 % mean, and the participation
    gap, ``participating`` (the mean over training clients) minus that mean."""
    if not len(acc):
        return {}
    mean = float(acc.mean())
    return {
        "unseen/accuracy": mean,
        "unseen/accuracy_worst10": decile_mean(acc, worst=True),
        "unseen/participation_gap": participating - mean,
    }


def run_held_out(run: RunView) -> np.ndarray:
    """The ids of the run's clients held out of training (drawn from the partition seed)."""
    return held_out_clients(run.cfg.dataset, run.cfg.seed, run.data.num_clients)


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

    def tests(self, data: FederatedData) -> ClientTests:
        """The stacked client test splits of ``data`` (made once per run's data)."""
        if self._tests is None or self._tests[0] is not data:
            self._tests = (data, client_tests(data))
        return self._tests[1]

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        run = record.run
        if record.round % run.cfg.eval_every and not record.last:
            return None
        metrics, table = evaluate_run(run, record.round, record.sampled, record.client_values,
                                      self.tests(run.data))
        return RoundVerdict(metrics=metrics, clients=table)


def tested_clients(data: FederatedData, held_out: np.ndarray | None = None) -> np.ndarray:
    """Which clients the per-client summaries cover: the training clients (none in
    ``held_out``) with a local test split, or all training clients when no client has one
    (then the table holds the label-mix accuracies)."""
    has_test = np.array([len(c.y_test) > 0 for c in data.clients])
    tested = has_test if has_test.any() else np.ones(len(has_test), dtype=bool)
    return tested & ~np.isin(np.arange(len(has_test)), held_out if held_out is not None else [])
