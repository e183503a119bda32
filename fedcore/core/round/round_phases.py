"""The phases of one round as functions of what they read: the local schedule, the sampler's
local losses, the accepted uplinks stacked for the rule, the rule's timed step, the BatchNorm
statistics, and the round's metrics and per-client columns (the driver,
``fedcore.core.round.simulation``, calls them in order)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedcore.core.metrics import client_stat_metrics, conflict_fraction, per_sample_eval
from fedcore.core.models.layout import load_flat_params
from fedcore.core.numerics.bn_statistics import average_bn_statistics
from fedcore.core.numerics.finite import all_finite
from fedcore.core.records import Closing, LocalSchedule
from fedcore.core.records.aggregate import Aggregate, UpdateBatch
from fedcore.core.round.schedules import local_lr
from fedcore.core.samplers import Population
from fedcore.core.stages.base import rejections

if TYPE_CHECKING:
    from torch import nn

    from fedcore.core.aggregators.base import Aggregator
    from fedcore.core.config import ExperimentConfig
    from fedcore.core.data.federated import FederatedData
    from fedcore.core.models.layout import ParamLayout
    from fedcore.core.privacy.ledger import Ledger
    from fedcore.core.records import ClientUpdate, Message, StageContext
    from fedcore.core.samplers.base import Sampler


@dataclass
class RoundOutcome:
    """A played round: its metrics and its per-client columns (by client id)."""

    metrics: dict[str, float]
    client_values: dict[str, np.ndarray]


def local_schedule(cfg: ExperimentConfig, round: int) -> LocalSchedule:
    """How long and how fast clients train in ``round`` (the ``local`` block, its lr schedule)."""
    loc = cfg.local
    return LocalSchedule(
        epochs=loc.epochs,
        steps=loc.steps,
        batch_size=loc.batch_size,
        lr=local_lr(loc, round, cfg.rounds),
        momentum=loc.momentum,
        weight_decay=loc.weight_decay,
    )


def sample(
    sampler: Sampler, cfg: ExperimentConfig, data: FederatedData, ids: np.ndarray, round: int,
    loss: Callable[[list[int]], np.ndarray], per_round: int | None = None,
) -> np.ndarray:
    """The round's clients, sorted, from ``sampler``, which sees the training population
    ``ids`` only, numbered 0..n-1 (all clients when none is held out; the available ones under
    ``system``); ``loss``: the global model's local loss of the named clients; ``per_round``:
    how many to draw (default ``clients_per_round``)."""
    m = cfg.clients_per_round if per_round is None else per_round
    if m == 0:  # every free slot taken (an asynchronous rule's clients in flight)
        return np.zeros(0, dtype=np.int64)
    pop = Population(
        seed=cfg.seed,
        round=round,
        num_clients=len(ids),
        per_round=m,
        sizes=np.array([data.clients[k].num_train for k in ids]),
        local_loss=lambda chosen: loss([int(ids[k]) for k in chosen]),
    )
    return np.sort(ids[checked_draw(sampler, pop, sampler.sample(pop))])


def checked_draw(sampler: Sampler, pop: Population, drawn: object) -> np.ndarray:
    """``drawn`` as int64 ids when it holds ``pop.per_round`` (any number for a sampler that is
    not ``fixed_size``) distinct integers in ``0..pop.num_clients-1``; otherwise a one-line
    ``ValueError`` naming the sampler (a plugin's duplicates, -1, floats or every client ran
    silently: -1 wrapped to the last client, floats were truncated)."""
    arr = np.asarray(drawn)
    problem = None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        problem = f"a {arr.dtype} array of shape {arr.shape}, not a list of integer ids"
    elif sampler.fixed_size and len(arr) != pop.per_round:
        problem = f"{len(arr)} client id(s), not clients_per_round={pop.per_round}"
    elif len(arr) and (arr.min() < 0 or arr.max() >= pop.num_clients):
        bad = arr.min() if arr.min() < 0 else arr.max()
        problem = f"client id {int(bad)}, outside 0..{pop.num_clients - 1}"
    elif len(np.unique(arr)) != len(arr):
        values, counts = np.unique(arr, return_counts=True)
        problem = f"client id {int(values[counts > 1][0])} more than once"
    if problem is not None:
        cls = type(sampler)
        raise ValueError(f"sampler {getattr(sampler, 'name', cls.__name__)!r} "
                         f"({cls.__module__}:{cls.__qualname__}) returned {problem} in round "
                         f"{pop.round}; a sampler returns {pop.per_round} distinct integer ids "
                         f"in 0..{pop.num_clients - 1}")
    return arr.astype(np.int64)


def local_loss(
    model: nn.Module, params: torch.Tensor, buffers: Mapping[str, torch.Tensor],
    data: FederatedData, client_ids: list[int],
) -> np.ndarray:
    """The model at ``params`` (eval mode): its mean loss on each client's training split."""
    load_flat_params(model, params)
    if buffers:
        model.load_state_dict(dict(buffers), strict=False)
    out = []
    with torch.no_grad():
        for k in client_ids:
            c = data.clients[k]
            _, loss = per_sample_eval(model, c.x_train, c.y_train)
            out.append(float(loss.double().mean()) if len(loss) else math.nan)
    return np.array(out)


def update_batch(
    msgs: list[Message], uplink: tuple[str, ...], layout: ParamLayout, params: torch.Tensor,
    round: int,
    rule_sizes: Callable[[list[int]], Sequence[float]] | None = None,
) -> UpdateBatch:
    """The accepted clients' uplink vectors, one mapping of m x d matrices by name: the batch's
    ``deltas`` is its ``delta`` (zeros when no delta is sent), ``extras`` the others;
    ``rule_sizes``: the sampler's weights for the rule (the sample counts by default)."""
    received = [m for m in msgs if m.accepted]
    kept = [m.update for m in received]
    sizes = rule_sizes or list
    vectors = {name: torch.stack([m.sent[name] for m in received])
               for name in uplink if received}
    return UpdateBatch(
        deltas=vectors.pop("delta", params.new_zeros((len(received), layout.dim))),
        num_samples=torch.tensor(sizes([u.num_samples for u in kept])),
        layout=layout,
        stats={k: torch.tensor([u.stats[k] for u in kept], dtype=torch.float64)
               for k in kept[0].stats}
        if kept
        else {},
        client_ids=torch.tensor([u.client_id for u in kept], dtype=torch.long),
        round=round,
        extras=vectors,
        num_steps=torch.tensor([u.num_steps for u in kept], dtype=torch.long),
    )


def aggregate(
    aggregator: Aggregator, batch: UpdateBatch, params: torch.Tensor, device: torch.device
) -> tuple[Aggregate, float]:
    """The rule's step (zero when no update was accepted) and its wall seconds."""
    if batch.m == 0:
        return Aggregate(torch.zeros_like(params)), 0.0
    t0 = time.perf_counter()
    result = aggregator.aggregate(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if not all_finite(result.step):
        raise FloatingPointError(f"round {batch.round}: the {aggregator.name} step is not finite")
    return result, seconds


def private_aggregate(
    aggregator: Aggregator, batch: UpdateBatch, params: torch.Tensor, device: torch.device,
    privacy: Ledger | None, sampled: list[int],
) -> tuple[Aggregate, float]:
    """`aggregate` under the run's privacy mechanism, if any: under central DP the rule
    sees the noised mean of the clipped deltas; the round is accounted (under local DP too: a
    client stage noised each update)."""
    if privacy is None:
        return aggregate(aggregator, batch, params, device)
    result = aggregate(aggregator, privacy.privatize(batch), params, device)
    privacy.spend(sampled)
    return result


def closing(
    params: torch.Tensor, ups: list[ClientUpdate], device: torch.device,
    rule_sizes: Callable[[list[int]], Sequence[float]] | None = None,
) -> Closing:
    """The server after the rule's step: ``params`` and the kept clients' BatchNorm running
    statistics (not part of theta) averaged by the sampler's weights (sample counts by
    default), empty when they send none; the stages' ``end_round`` may change both."""
    if not ups or not ups[0].buffers:
        return Closing(params)
    sizes = (rule_sizes or list)([u.num_samples for u in ups])
    w = torch.tensor(sizes, dtype=torch.float32, device=device)
    client_buffers = [u.buffers for u in ups]
    weights = w / w.sum()
    return Closing(params, average_bn_statistics(client_buffers, weights), client_buffers,
                   weights)


def client_columns(
    msgs: list[Message], values: dict[str, torch.Tensor], num_clients: int
) -> dict[str, np.ndarray]:
    """Per-client columns of the round: the values the rule reported for the accepted clients
    (NaN for the others) and, per stage that rejected a client, ``rejected_by/<stage>``."""
    ids = [m.update.client_id for m in msgs if m.accepted]
    out = {}
    for name, column_values in values.items():
        column = np.full(num_clients, np.nan)
        column[ids] = torch.as_tensor(column_values).detach().cpu().double().numpy()
        out[name] = column
    for name, rejected in rejections(msgs).items():
        out[f"rejected_by/{name}"] = np.isin(np.arange(num_clients), rejected)
    return out


# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "client": {
        "rejected_by/<stage>": "1 where that stage rejected the client's update this round",
    },
    "round": {
        "train/loss": (
            "sample-weighted mean (float64) of the sampled clients' training loss over local "
            "steps (NaN in a round that sampled no client)"
        ),
        "agg/conflict_fraction": (
            "share of accepted client updates with a negative dot product with the server step"
        ),
        "agg/rejected_clients": (
            "sampled clients left out of the round: a stage rejected them (a sent vector or a "
            "scalar the rule needs was NaN or Inf, or a filter of method.stages)"
        ),
        "agg/seconds": "wall-clock seconds of the rule's aggregate call",
        "comm/bytes_up": (
            "uplink bytes this round: compressed payloads, n_k (4 B) and BatchNorm statistics "
            "(fp16)"
        ),
        "comm/bytes_up_total": "uplink bytes since round 1",
        "comm/bytes_down": (
            "downlink bytes this round: the model plus the rule's broadcast vectors, per sampled "
            "client"
        ),
        "comm/bytes_down_total": "downlink bytes since round 1",
    },
}


def downlink_bytes(rc: StageContext, clients: int) -> int:
    """What the round's ``clients`` receive: theta and the rule's downlink."""
    return clients * sum(v.numel() * v.element_size() for v in (rc.params, *rc.downlink.values()))


def round_metrics(
    msgs: list[Message], batch: UpdateBatch, result: Aggregate, seconds: float,
    bytes_down: int, totals: tuple[int, int],
) -> dict[str, float]:
    """The driver's own metrics of a round (training loss, conflict, rejections, timing,
    bytes; ``totals``: the uplink and downlink bytes since round 1) and the client
    statistics. A rule whose batch carries no deltas may report its own
    ``agg/conflict_fraction`` in its metrics, which are merged after these."""
    ups = [m.update for m in msgs]
    kept = sum(m.accepted for m in msgs)
    n = torch.tensor([float(u.num_samples) for u in ups], dtype=torch.float64)
    train_loss = math.nan  # a round without clients (Poisson sampling under central DP)
    if ups:
        losses = torch.stack([u.train_loss for u in ups]).cpu().double()
        train_loss = float((losses * n).sum() / n.sum())
    return {
        "train/loss": train_loss,
        "agg/conflict_fraction": conflict_fraction(batch.deltas, result.step) if kept else 0.0,
        "agg/rejected_clients": float(len(ups) - kept),
        "agg/seconds": seconds,
        "comm/bytes_up": float(sum(m.nbytes for m in msgs)),
        "comm/bytes_up_total": float(totals[0]),
        "comm/bytes_down": float(bytes_down),
        "comm/bytes_down_total": float(totals[1]),
    }


def stat_metrics(msgs: list[Message]) -> dict[str, float]:
    """The clients' statistics summed or averaged over the round (``fedcore.core.metrics``)."""
    return client_stat_metrics([m.update.stats for m in msgs])
