"""The built-in evaluation: the global model on the global test set and on every client's
local test split, every ``eval_every`` rounds and at the last round."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcore.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.client_table import ClientTable
from fedcore.layout import load_flat_params
from fedcore.metrics import (
    eval_with_embeddings,
    fairness_summary,
    label_mix_accuracy,
    per_sample_eval,
    representation_stats,
)
from fedcore.models.protocol import REPR_METRICS

if TYPE_CHECKING:
    from fedcore.simulation import ClientTable, Simulation


class Evaluation(Callback):
    """Evaluates on rounds ``eval_every``, 2 ``eval_every``, ... and the last one: its metrics
    (``test/*``, ``clients/*``, ``repr/*``) and the round's per-client table."""

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        if record.round % record.sim.cfg.eval_every and not record.last:
            return None
        metrics, table = evaluate(record.sim, record.round, record.sampled, record.client_values)
        return RoundVerdict(metrics=metrics, clients=table)


def evaluate(
    sim: Simulation,
    round: int,
    sampled: np.ndarray,
    client_values: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, float], ClientTable]:
    """The rule's evaluation point on the global test set, on the validation set (when
    ``dataset.val_fraction`` holds one out) and on every client's local test split (none,
    ``test_fraction`` 0: the global per-class accuracy weighted by each client's
    label mix). The model holds the global parameters afterwards."""
    model, data = sim.model, sim.data
    params = sim.aggregator.eval_params(sim.params)
    load_flat_params(model, params)
    if sim.buffers:
        model.load_state_dict(sim.buffers, strict=False)
    if REPR_METRICS in sim.skipped_metrics:
        correct, loss = per_sample_eval(model, data.x_test, data.y_test)
    else:
        correct, loss, z = eval_with_embeddings(model, data.x_test, data.y_test)
    metrics = {"test/accuracy": float(correct.float().mean()), "test/loss": float(loss.mean())}
    if data.x_val is not None and data.y_val is not None:  # dataset.val_fraction > 0
        v_correct, v_loss = per_sample_eval(model, data.x_val, data.y_val)
        metrics.update({"val/accuracy": float(v_correct.float().mean()),
                        "val/loss": float(v_loss.mean())})
    if REPR_METRICS not in sim.skipped_metrics:
        metrics.update(representation_stats(z, data.y_test))
    n_clients = data.num_clients
    has_test = np.array([len(c.y_test) > 0 for c in data.clients])
    if has_test.any():
        c_correct, c_loss = per_sample_eval(model, sim._eval_x, sim._eval_y)
        owner = sim._eval_owner.to(c_correct.device)
        counts = torch.bincount(owner, minlength=n_clients).clamp_min(1).double()
        acc = (torch.bincount(owner, c_correct.double(), minlength=n_clients) / counts).cpu()
        cl = (torch.bincount(owner, c_loss.double(), minlength=n_clients) / counts).cpu()
    else:  # no local test splits (test_fraction 0): the global test set by label mix
        mix = data.label_mix()
        acc, cl = (t.cpu() for t in label_mix_accuracy(correct, loss, data.y_test, mix))
        has_test = np.ones(n_clients, dtype=bool)
    acc_np = acc.numpy()
    metrics.update(fairness_summary(acc_np[has_test]))
    if params is not sim.params:
        load_flat_params(model, sim.params)
    table = ClientTable(
        round=round,
        client_id=np.arange(n_clients),
        accuracy=acc_np,
        loss=cl.numpy(),
        num_samples=np.array([c.num_train for c in data.clients]),
        sampled=np.isin(np.arange(n_clients), sampled),
        extra={
            "noisy": np.isin(np.arange(n_clients), data.noisy_clients),
            "byzantine": np.isin(np.arange(n_clients), sorted(sim.byzantine)),
            **(client_values or {}),
        },
    )
    return metrics, table


def tested_clients(sim: Simulation) -> np.ndarray:
    """Which clients the per-client summaries cover: those with a local test split, or all of
    them when no client has one (then the table holds the label-mix accuracies)."""
    has_test = np.array([len(c.y_test) > 0 for c in sim.data.clients])
    return has_test if has_test.any() else np.ones(len(has_test), dtype=bool)
