"""The round loop: sample, train locally, stack deltas, aggregate, step, evaluate
(docs/explanation/architecture.md)."""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedcore import checkpoint, code_digest, compose, stopping
from fedcore.aggregators import Aggregate, UpdateBatch
from fedcore.bn_statistics import average_bn_statistics
from fedcore.callbacks import Callback, RoundRecord
from fedcore.callbacks import chain as callback_chain
from fedcore.callbacks.evaluation import evaluate
from fedcore.callbacks.signals import SignalStop
from fedcore.client_table import ClientTable
from fedcore.clients import ClientData, ClientUpdate, Commit, LocalSchedule
from fedcore.config import ConfigError, ExperimentConfig
from fedcore.data.federated import FederatedData, build_federated_data
from fedcore.data.own import config_with_data
from fedcore.device_check import check_device_present
from fedcore.engines import sequential
from fedcore.layout import flat_params, load_flat_params
from fedcore.limits import shown
from fedcore.metrics import client_stat_metrics, conflict_fraction, per_sample_eval
from fedcore.models.external import ModelArg, config_with_model, is_opaque, with_initial_weights
from fedcore.models.protocol import REPR_METRICS, has_embedding
from fedcore.round_context import RoundContext
from fedcore.samplers import Population
from fedcore.schedules import local_lr
from fedcore.stages import Message
from fedcore.store import ClientStore

if TYPE_CHECKING:
    import pandas as pd


__all__ = ["Callback", "ClientStore", "ClientTable", "Result", "Simulation", "run"]

log = logging.getLogger("fedcore")

# What Simulation.state_dict holds (round protocol v2); a checkpoint lacking one cannot resume.
STATE_KEYS = (
    "config_hash", "round", "bytes_up_total", "bytes_down_total", "params", "buffers",
    "aggregator", "store", "history", "client_tables", "rng",
)


@dataclass
class Result:
    config: dict[str, Any]
    config_hash: str
    history: list[dict[str, float]] = field(default_factory=list)
    client_tables: list[ClientTable] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    skipped_metrics: dict[str, str] = field(default_factory=dict)  # pattern -> why not measured
    stopped: str | None = None  # why a callback ended the run early (None: all rounds played)

    def rounds_frame(self) -> pd.DataFrame:
        """One row per round, one column per metric (pandas)."""
        from fedcore.frames import rounds_frame

        return rounds_frame(self.history)

    def clients_frame(self) -> pd.DataFrame:
        """One row per (evaluated round, client): accuracy, loss, samples, sampled (pandas)."""
        from fedcore.frames import clients_frame

        return clients_frame(self.client_tables)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when present, else cpu; a named device must exist here (ConfigError)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_device_present(name)
    return torch.device(name)


@dataclass
class RoundOutcome:
    """A played round: its metrics and the per-client values the rule reported (by client id)."""

    metrics: dict[str, float]
    client_values: dict[str, np.ndarray]


class Simulation:
    """One federated simulation; owns the global model, the client store and the aggregator."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        callbacks: list[Callback] | tuple[Callback, ...] = (),
        data: FederatedData | None = None,
        device: str | None = None,
        model: ModelArg | None = None,
        builtins: dict[str, Callback | None] | None = None,
    ) -> None:
        """``device`` (e.g. a pinned ``cuda:1``) overrides ``cfg.device`` without changing
        the config or its hash. ``data`` (own data, see :mod:`fedcore.data.own`) and ``model``
        (an ``nn.Module``, a class or a factory) replace the config's; ``self.cfg`` then records
        them (name, source, digest), so its hash is theirs. ``builtins`` replaces built-in
        callbacks by name (None turns one off; :data:`fedcore.callbacks.chain.BUILTINS`)."""
        if model is not None:
            cfg = config_with_model(cfg, model)
        if data is not None:
            cfg = config_with_data(cfg, data)
        elif cfg.dataset.digest is not None:
            raise ConfigError(
                f"dataset: {cfg.dataset.name!r} is own data (digest {cfg.dataset.digest}); "
                "pass it as Simulation(cfg, data=...)"
            )
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.builtins = callback_chain.builtins(cfg.target_accuracy, builtins)
        self.device = resolve_device(device or cfg.device)
        self.data = data or build_federated_data(cfg.dataset, cfg.seed, self.device, cfg.clients)
        parts = compose.build(cfg, self.data, self.device, model)
        if is_opaque(model):  # a lambda, closure, bound method: recorded by what it built
            self.cfg = cfg = with_initial_weights(cfg, parts.model)
        self.byzantine = parts.byzantine
        self.client_algo = parts.client_algo
        self.model = parts.model
        self.layout = parts.layout
        self.params = flat_params(self.model)
        self.buffers = {k: v.detach().clone() for k, v in self.model.named_buffers()}
        self.aggregator = parts.aggregator
        self.compressor = parts.compressor
        self.chain = parts.chain
        self.sampler = parts.sampler
        self.engine, self.engine_name, self.engine_reason = (
            parts.engine, parts.engine_name, parts.engine_reason
        )
        log.info("engine: %s (%s)", self.engine_name, self.engine_reason)
        self.store = ClientStore()
        self.round = 0
        self.bytes_up_total = 0
        self.bytes_down_total = 0
        self.history: list[dict[str, float]] = []  # the Result's, kept here to be checkpointed
        self.client_tables: list[ClientTable] = []
        self._eval_x, self._eval_y, self._eval_owner = self._stack_client_tests(self.data.clients)
        self.skipped_metrics: dict[str, str] = {}  # metric pattern -> why it is not measured
        if not has_embedding(self.model):
            self.skipped_metrics[REPR_METRICS] = "the model has no embedding(x)/head(z)"
            log.warning("%s metrics skipped: %s", REPR_METRICS, self.skipped_metrics[REPR_METRICS])

    @staticmethod
    def _stack_client_tests(
        cs: list[ClientData],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.cat([c.x_test for c in cs])
        y = torch.cat([c.y_test for c in cs])
        owner = torch.cat([torch.full((len(c.y_test),), c.client_id, dtype=torch.long) for c in cs])
        return x, y, owner

    def sample_clients(self, round: int) -> np.ndarray:
        """The round's clients, sorted, from the sampler (``method.sampler``)."""
        pop = Population(
            seed=self.cfg.seed,
            round=round,
            num_clients=self.data.num_clients,
            per_round=self.cfg.clients_per_round,
            sizes=np.array([c.num_train for c in self.data.clients]),
            local_loss=self.local_loss,
        )
        return np.sort(np.asarray(self.sampler.sample(pop)))

    def local_loss(self, client_ids: list[int]) -> np.ndarray:
        """The global model's mean loss on each client's training split (eval mode)."""
        load_flat_params(self.model, self.params)
        if self.buffers:
            self.model.load_state_dict(self.buffers, strict=False)
        out = []
        with torch.no_grad():
            for k in client_ids:
                c = self.data.clients[k]
                _, loss = per_sample_eval(self.model, c.x_train, c.y_train)
                out.append(float(loss.double().mean()) if len(loss) else math.nan)
        return np.array(out)

    def schedule(self, round: int) -> LocalSchedule:
        loc = self.cfg.local
        return LocalSchedule(
            epochs=loc.epochs,
            steps=loc.steps,
            batch_size=loc.batch_size,
            lr=local_lr(loc, round, self.cfg.rounds),
            momentum=loc.momentum,
            weight_decay=loc.weight_decay,
        )

    def round_context(self, round: int) -> RoundContext:
        """Configure phase: what every client and stage sees this round (theta, downlink)."""
        rc = RoundContext(
            cfg=self.cfg,
            device=self.device,
            data=self.data,
            model=self.model,
            layout=self.layout,
            store=self.store,
            client_algo=self.client_algo,
            aggregator=self.aggregator,
            compressor=self.compressor,
            byzantine=self.byzantine,
            round=round,
            params=self.params,
            buffers=self.buffers,
            schedule=self.schedule(round),
            downlink=self.aggregator.broadcast(),
            needs_num_steps=self.chain.needs_num_steps,
        )
        rc.start_point = functools.partial(self.chain.start_point, rc)
        return rc

    def train_client(self, client_id: int, round: int) -> ClientUpdate:
        """One client's update, trained on its own (the sequential engine's unit)."""
        return sequential.train_client(self.round_context(round), client_id)

    def run_round(self, round: int, order: list[int] | None = None) -> dict[str, float]:
        """Play one round and return its metrics."""
        return self.play_round(round, order=order).metrics

    def play_round(
        self, round: int, sampled: Iterable[int] | None = None, order: list[int] | None = None
    ) -> RoundOutcome:
        """One round as its phases; ``sampled`` None: the sampler draws the round's clients."""
        # sample
        ids = [int(k) for k in (self.sample_clients(round) if sampled is None else sampled)]
        # configure: what every client and stage sees this round
        rc = self.round_context(round)
        # begin stages
        opening = self.chain.begin_round(rc, ids)
        # train: the engine returns each client's trained update
        updates = self.engine.train_round(rc, ids, order)
        self._note_fallback()
        ups = [updates[k] for k in ids]
        # client stages: change the trained updates before they are sent
        self.chain.client_side(ups, rc)
        # uplink: what goes on the wire, and its bytes
        msgs = self.chain.send(ups, rc)
        # server stages: what arrived, accepted or not
        self.chain.receive(msgs, rc)
        kept = [m.update for m in msgs if m.accepted]
        # rule
        batch = self.update_batch(rc, msgs)
        result, agg_seconds = self.aggregate(batch)
        # commit: each client's own state, knowing what the server received
        for m in msgs:
            state = self.store[m.update.client_id]
            self.client_algo.commit(Commit(state, m.update, m.sent, m.accepted))
        closing = self.chain.end_round(rc, ids)
        # apply
        self.params = self.params + result.step
        if closing.step is not None:  # a stage's extra server step
            self.params = self.params + closing.step
        self._average_buffers(kept)
        # round metrics
        bytes_up = sum(m.nbytes for m in msgs)
        bytes_down = len(ids) * sum(
            v.numel() * v.element_size() for v in (rc.params, *rc.downlink.values())
        )
        self.bytes_up_total += bytes_up
        self.bytes_down_total += bytes_down
        n = torch.tensor([float(u.num_samples) for u in ups])
        train_loss = float((torch.stack([u.train_loss for u in ups]).cpu() * n).sum() / n.sum())
        per_client = batch.deltas if result.client_deltas is None else result.client_deltas
        metrics = {
            "train/loss": train_loss,
            "agg/conflict_fraction": conflict_fraction(per_client, result.step) if kept else 0.0,
            "agg/rejected_clients": float(len(ups) - len(kept)),
            "agg/seconds": agg_seconds,
            "comm/bytes_up": float(bytes_up),
            "comm/bytes_up_total": float(self.bytes_up_total),
            "comm/bytes_down": float(bytes_down),
            "comm/bytes_down_total": float(self.bytes_down_total),
        }
        metrics.update(result.metrics)
        metrics.update(closing.metrics)
        metrics.update(opening)
        metrics.update(client_stat_metrics([u.stats for u in ups]))
        return RoundOutcome(metrics, self._per_client(kept, result.client_values))

    def _note_fallback(self) -> None:
        """``engine_name``/``engine_reason`` say what trained: a vectorised engine that fell back
        to sequential training (an objective it cannot express) makes them say so."""
        why = getattr(self.engine, "fallback", None)
        if why and self.engine_name != sequential.NAME:
            self.engine_name = sequential.NAME
            self.engine_reason = f"the vectorised engine fell back to sequential training: {why}"
            log.info("engine: %s (%s)", self.engine_name, self.engine_reason)

    def update_batch(self, rc: RoundContext, msgs: list[Message]) -> UpdateBatch:
        """The accepted clients' vectors stacked as m x d matrices (zeros when no delta is sent)."""
        received = [m for m in msgs if m.accepted]
        kept = [m.update for m in received]
        names = self.client_algo.uplink
        if not kept:
            deltas = self.params.new_zeros((0, self.layout.dim))
        elif "delta" in names:
            deltas = torch.stack([m.sent["delta"] for m in received])
        else:
            deltas = self.params.new_zeros((len(received), self.layout.dim))
        extras = {
            name: torch.stack([m.sent[name] for m in received])
            for name in names
            if name != "delta" and received
        }
        return UpdateBatch(
            deltas=deltas,
            num_samples=torch.tensor([u.num_samples for u in kept]),
            layout=self.layout,
            stats={k: torch.tensor([u.stats[k] for u in kept]) for k in kept[0].stats}
            if kept
            else {},
            client_ids=torch.tensor([u.client_id for u in kept], dtype=torch.long),
            round=rc.round,
            extras=extras,
            num_steps=torch.tensor([u.num_steps for u in kept], dtype=torch.long),
        )

    def aggregate(self, batch: UpdateBatch) -> tuple[Aggregate, float]:
        """Server phase: the rule's step (zero when no update was accepted), timed."""
        if batch.m == 0:
            return Aggregate(torch.zeros_like(self.params)), 0.0
        t0 = time.perf_counter()
        result = self.aggregator.aggregate(batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if not torch.isfinite(result.step).all():
            raise FloatingPointError(
                f"round {batch.round}: the {self.aggregator.name} step is not finite"
            )
        return result, seconds

    def _per_client(
        self, kept: list[ClientUpdate], values: dict[str, torch.Tensor]
    ) -> dict[str, np.ndarray]:
        """Per-client values a rule reported this round (NaN for clients not in it)."""
        ids = [u.client_id for u in kept]
        out = {}
        for name, column_values in values.items():
            column = np.full(self.data.num_clients, np.nan)
            column[ids] = torch.as_tensor(column_values).detach().cpu().double().numpy()
            out[name] = column
        return out

    def _average_buffers(self, ups: list[ClientUpdate]) -> None:
        """BatchNorm running statistics of the kept clients, by sample count (not part of
        theta); moment-matched variances when the compressor's method asks for them."""
        if not ups or not ups[0].buffers:
            return
        w = torch.tensor([u.num_samples for u in ups], dtype=torch.float32, device=self.device)
        self.buffers.update(
            average_bn_statistics(
                [u.buffers for u in ups], w / w.sum(), self.chain.moment_matched_bn
            )
        )

    def evaluate(
        self,
        round: int,
        sampled: np.ndarray,
        client_values: dict[str, np.ndarray] | None = None,
    ) -> tuple[dict[str, float], ClientTable]:
        """The built-in evaluation of the current global model
        (:func:`fedcore.callbacks.evaluation.evaluate`)."""
        return evaluate(self, round, sampled, client_values)

    def run(self, order_fn: Callable[[list[int]], list[int]] | None = None) -> Result:
        """Run all remaining rounds; rounds are numbered 1..R (the MLflow step).

        Each round: sample, play, then the callbacks (:mod:`fedcore.callbacks.chain`). A
        callback's stop ends the run after that round: the round is recorded and checkpointed
        (with ``checkpoint_every`` set; the checkpoint is kept for a resume), ``result.stopped``
        says why, and ``on_run_end`` gets the summary of the rounds played. A requested stop
        (:mod:`fedcore.stopping`, e.g. SIGTERM) ends it the same way but then raises
        :class:`~fedcore.stopping.StopRequested` instead of finishing."""
        signal = SignalStop()
        components = callback_chain.contributed(
            [self.client_algo, self.aggregator, self.compressor]
        )
        self.run_callbacks = callback_chain.chain(
            self.builtins, components, self.callbacks, signal
        )
        result = Result(
            self.cfg.resolved(), self.cfg.config_hash(), self.history, self.client_tables,
            skipped_metrics=dict(self.skipped_metrics),
        )
        for cb in self.run_callbacks:
            cb.on_run_start(self)
        stopping.check(self.round)  # no round starts once a stop was requested
        total = self.cfg.rounds
        while self.round < total:
            r = self.round + 1
            sampled = self.sample_clients(r)
            order = order_fn(list(map(int, sampled))) if order_fn else None
            outcome = self.play_round(r, sampled, order)
            self.round = r
            record = RoundRecord(r, outcome.metrics, self, sampled, outcome.client_values)
            result.history.append({"round": r, **outcome.metrics})
            callback_chain.end_round(
                self.run_callbacks, record, result.history[-1], result.client_tables
            )
            if record.stop is not None and r < total:
                result.stopped = record.stop
                break
        if signal.reason is not None and result.stopped is not None:
            raise stopping.StopRequested(signal.reason)
        callback_chain.end_run(self.run_callbacks, result)
        if self.cfg.checkpoint_every and result.stopped is None:
            checkpoint.remove(checkpoint.run_folder(self.cfg))
        return result

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to finish with the same numbers (plain containers)."""
        return {
            "config_hash": self.cfg.config_hash(),
            "round": self.round,
            "bytes_up_total": self.bytes_up_total,
            "bytes_down_total": self.bytes_down_total,
            "params": self.params,
            "buffers": self.buffers,
            "aggregator": self.aggregator.state_dict(),
            "store": self.store.state_dict(),
            "history": self.history,
            "client_tables": [vars(t) for t in self.client_tables],
            "rng": checkpoint.rng_state(),
            "stages": self.chain.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], rng: bool = True) -> None:
        """Restore :meth:`state_dict` (and, with ``rng``, the global generators it saved).

        A checkpoint of an older version (lacking keys, e.g. ``bytes_down_total`` before round
        protocol v2), of another config, or inconsistent with this run (``check_state``) raises
        a one-line ``CheckpointError`` naming its file, before any change.
        """
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise checkpoint.unusable(
                state, f"it lacks {', '.join(missing)} (written by an older fedcore version)"
            )
        if state["config_hash"] != self.cfg.config_hash():
            raise checkpoint.unusable(
                state, f"it is a checkpoint of config {shown(state['config_hash'])}, "
                f"not of this run's config {self.cfg.config_hash()}"
            )
        problem = checkpoint.check_state(
            state, self.cfg.rounds, self.cfg.eval_every, self.params, self.buffers
        )
        if problem:
            raise checkpoint.unusable(state, problem)
        stages = state.get("stages")  # absent in checkpoints written before the stage chain
        if stages is not None and (
            not isinstance(stages, list) or len(stages) != len(self.chain.stages)
            or not all(isinstance(st, dict) for st in stages)
        ):
            raise checkpoint.unusable(state, "its stage states do not match this run's stages")
        self.round = int(state["round"])
        self.bytes_up_total = int(state["bytes_up_total"])
        self.bytes_down_total = int(state["bytes_down_total"])
        self.params = state["params"].to(self.device)
        self.buffers = {k: v.to(self.device) for k, v in state["buffers"].items()}
        self.aggregator.load_state_dict(state["aggregator"])
        self.store.load_state_dict(state["store"])
        self.chain.load_state_dict(stages or [{} for _ in self.chain.stages])
        self.history[:] = [dict(h) for h in state["history"]]
        self.client_tables[:] = [ClientTable(**t) for t in state["client_tables"]]
        if rng:
            checkpoint.set_rng_state(state["rng"])

    def save_checkpoint(self) -> None:
        """Write this round's checkpoint and tell the run's callbacks its path."""
        path = checkpoint.save(self.state_dict(), checkpoint.run_folder(self.cfg), self.round,
                               code=code_digest.of_config(self.cfg))
        for cb in getattr(self, "run_callbacks", self.callbacks):
            cb.on_checkpoint(path)

    def resume(self, state: dict[str, Any] | None = None) -> bool:
        """Continue from ``state``, else from the newest local checkpoint; False if none."""
        if state is None:
            code = code_digest.of_config(self.cfg)
            state = checkpoint.latest(checkpoint.run_folder(self.cfg), code)
        if state is None:
            return False
        self.load_state_dict(state)
        log.info("resumed %s at round %d", self.cfg.config_hash(), self.round)
        return True




def run(
    cfg: ExperimentConfig,
    callbacks: list[Callback] | tuple[Callback, ...] = (),
    data: FederatedData | None = None,
    model: ModelArg | None = None,
) -> Result:
    """Run one simulation of ``cfg`` (with own ``data`` or ``model``), reporting to
    ``callbacks`` (:mod:`fedcore.callbacks`)."""
    return Simulation(cfg, callbacks, data=data, model=model).run()
