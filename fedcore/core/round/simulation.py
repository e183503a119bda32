"""The round loop: sample, train locally, stack deltas, aggregate, step, evaluate
(docs/explanation/architecture.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from fedcore.core import system
from fedcore.core.callbacks import Callback
from fedcore.core.callbacks import dispatch as callback_dispatch
from fedcore.core.callbacks.signals import SignalStop
from fedcore.core.component.base import Component
from fedcore.core.compose import assembly as compose
from fedcore.core.compose.assembly import resolve_device
from fedcore.core.config import ExperimentConfig
from fedcore.core.data.federated import FederatedData
from fedcore.core.data.holdout import of_data, training_clients
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.engines.select import engine_metrics, note_fallback
from fedcore.core.models.external import ModelArg, is_opaque, with_initial_weights
from fedcore.core.models.layout import flat_params
from fedcore.core.models.protocol import REPR_METRICS, has_embedding
from fedcore.core.records import LocalSchedule
from fedcore.core.records.client_table import ClientTable
from fedcore.core.records.plan import Commit
from fedcore.core.records.run import Result, RoundRecord, RunView
from fedcore.core.records.store import ClientStore
from fedcore.core.round import checkpoint, code_digest, round_phases, run_state
from fedcore.core.round.round_phases import RoundOutcome
from fedcore.core.runtime import stopping

__all__ = ["Callback", "ClientStore", "ClientTable", "Result", "Simulation", "resolve_device",
           "run"]
log = logging.getLogger("fedcore")


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
        the config or its hash. ``data`` (own data, see ``fedcore.core.data.own``) and ``model``
        (an ``nn.Module``, a class or a factory) replace the config's; ``self.cfg`` then records
        them (name, source, digest), so its hash is theirs. ``builtins`` replaces built-in
        callbacks by name (None turns one off; ``fedcore.core.callbacks.dispatch.BUILTINS``)."""
        parts = compose.assemble(cfg, data, device, model)
        self.cfg, self.device, self.data = parts.cfg, parts.device, parts.data
        if is_opaque(model):  # a lambda, closure, bound method: recorded by what it built
            self.cfg = with_initial_weights(self.cfg, parts.model)
        if self.cfg.checkpoint_every:  # a planted key file: refused before any run starts
            checkpoint.check_key(checkpoint.run_folder(self.cfg).parent)
        self.callbacks = list(callbacks)
        self.builtins = callback_dispatch.builtins(self.cfg.target_accuracy, builtins,
                                                self.cfg.last_k)
        # clients never sampled for training (dataset.holdout_clients), and those that may be
        self.held_out = of_data(self.cfg.dataset, self.cfg.seed, self.data)
        self.training = training_clients(self.data.num_clients, self.held_out)
        self.configured = parts.callbacks  # the config's; their state is checkpointed
        self.byzantine, self.client_algo = parts.byzantine, parts.client_algo
        self.model, self.layout = parts.model, parts.layout
        self.params = flat_params(self.model)
        self.buffers = {k: v.detach().clone() for k, v in self.model.named_buffers()}
        self.aggregator = parts.aggregator
        self.system = system.build(self.cfg, self.data, self.aggregator)  # clock, availability
        self.compressor, self.chain, self.sampler = parts.compressor, parts.chain, parts.sampler
        self.privacy = parts.privacy  # None: no privacy mechanism
        self.privacy_params = self.privacy.params() if self.privacy is not None else {}
        self.engine, self.engine_name = parts.engine, parts.engine_name
        self.engine_reason = parts.engine_reason
        log.info("engine: %s (%s)", self.engine_name, self.engine_reason)
        self.store, self.round = ClientStore(), 0
        self.bytes_up_total, self.bytes_down_total = 0, 0
        self.history: list[dict[str, float]] = []  # the Result's, kept here to be checkpointed
        self.client_tables: list[ClientTable] = []
        self.skipped_metrics: dict[str, str] = {}  # metric pattern -> why it is not measured
        if not has_embedding(self.model):
            self.skipped_metrics[REPR_METRICS] = "the model has no embedding(x)/head(z)"
            log.warning("%s metrics skipped: %s", REPR_METRICS, self.skipped_metrics[REPR_METRICS])
        self.view = RunView(self)  # what callbacks see of the run

    def components(self) -> list[Component]:
        """Every component of the run, all seven kinds in the order of the axes: the client
        objective, the rule, the compressor, the sampler, the chain's stages (the uplink stage
        holds the error feedback) and the config's callbacks."""
        return [self.client_algo, self.aggregator, self.compressor, self.sampler,
                *self.chain.stages, *self.configured]

    def eval_params(self) -> torch.Tensor:
        """The parameters the rule evaluates (``Aggregator.eval_params``)."""
        return self.aggregator.eval_params(self.params)

    def personal_params(
        self, client_id: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """Client ``client_id``'s personal model, if the objective keeps one."""
        return self.client_algo.personal_params(self.store[client_id])

    @property
    def personalized(self) -> bool:
        return bool(self.client_algo.personalized)

    @property
    def projection_dim(self) -> int | None:
        return self.client_algo.projection_dim

    def sample_clients(self, round: int) -> np.ndarray:
        """The round's clients, sorted, from the sampler (``method.sampler``), which sees the
        training population only (``fedcore.core.round.round_phases.sample``)."""
        pool, m = self.system.pool(round, self.training, self.cfg.clients_per_round)
        return round_phases.sample(self.sampler, self.cfg, self.data, pool, round,
                                   self.local_loss, m)

    def local_loss(self, client_ids: list[int]) -> np.ndarray:
        """The global model's mean loss on each client's training split (eval mode)."""
        return round_phases.local_loss(self.model, self.params, self.buffers, self.data,
                                       client_ids)

    def schedule(self, round: int) -> LocalSchedule:
        return round_phases.local_schedule(self.cfg, round)

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
            byzantine=self.byzantine,
            round=round,
            params=self.params,
            buffers=self.buffers,
            schedule=self.schedule(round),
            uplink=tuple(self.client_algo.uplink),
            needs=frozenset(self.aggregator.needs),
            downlink=self.aggregator.broadcast(),
        )
        rc.start_point = functools.partial(self.chain.start_point, rc)
        return rc

    def play_round(
        self, round: int, sampled: Iterable[int] | None = None, order: list[int] | None = None
    ) -> RoundOutcome:
        """One round as its phases; ``sampled`` None: the sampler draws the round's clients."""
        # sample
        ids = [int(k) for k in (self.sample_clients(round) if sampled is None else sampled)]
        rc = self.round_context(round)  # configure: what every client and stage sees
        ids, order = self.system.plan(rc, ids, order)  # who trains, how far (late clients)
        # begin stages
        opening = self.chain.begin_round(rc, ids)
        # train: the engine returns each client's trained update
        updates = self.engine.train_round(rc, ids, order)
        self.engine_name, self.engine_reason = note_fallback(self.engine, self.engine_name,
                                                             self.engine_reason)
        ups = self.system.arrive(round, [updates[k] for k in ids])  # what reached the server
        # client stages: change the trained updates before they are sent
        self.chain.client_side(ups, rc)
        # uplink: what goes on the wire, and its bytes
        msgs = self.chain.send(ups, rc)
        # server stages: what arrived, accepted or not
        verdicts = self.chain.receive(msgs, rc)
        kept = [m.update for m in msgs if m.accepted]
        # rule
        batch = round_phases.update_batch(msgs, rc.uplink, self.layout, self.params, round,
                                          self.sampler.rule_sizes)
        result, seconds = round_phases.private_aggregate(
            self.aggregator, batch, self.params, self.device, self.privacy, ids)
        # commit: each client's own state, knowing what the server received
        for m in msgs:
            state = self.store[m.update.client_id]
            self.client_algo.commit(Commit(state, m.update, m.sent, m.accepted))
        # apply: the rule's step and the averaged BatchNorm statistics, then the stages close
        # the round (and may change both)
        closing = round_phases.closing(self.params + result.step, kept, self.device,
                                       self.sampler.rule_sizes)
        ending = self.chain.end_round(rc, ids, closing)
        self.params = closing.params
        self.buffers.update(closing.buffers)
        # round metrics
        bytes_down = round_phases.downlink_bytes(rc, len(ids))
        self.bytes_up_total += sum(m.nbytes for m in msgs)
        self.bytes_down_total += bytes_down
        metrics = round_phases.round_metrics(msgs, batch, result, seconds, bytes_down,
                                             (self.bytes_up_total, self.bytes_down_total))
        for more in (result.metrics, verdicts, ending, opening, round_phases.stat_metrics(msgs),
                     engine_metrics(self.engine), self.system.metrics()):
            metrics.update(more)
        columns = round_phases.client_columns(msgs, result.client_values, self.data.num_clients)
        return RoundOutcome(metrics, columns)

    def run(self, order_fn: Callable[[list[int]], list[int]] | None = None) -> Result:
        """Run all remaining rounds; rounds are numbered 1..R (the MLflow step).

        Each round: sample, play, then the callbacks (``fedcore.core.callbacks.dispatch``). A
        callback's ``finish`` (converged) ends the run after that round as finished, with
        ``result.converged`` saying why. A callback's stop pauses the run after that round:
        the round is recorded and checkpointed (with ``checkpoint_every`` set; kept for a
        resume), ``result.stopped`` says why, and ``on_run_end`` gets the summary of the rounds
        played. A requested stop (``fedcore.core.runtime.stopping``, e.g. SIGTERM) ends it the
        same way but raises ``fedcore.core.runtime.stopping.StopRequested`` instead of finishing."""
        signal = SignalStop()
        privacy = self.privacy.callbacks() if self.privacy is not None else []
        components = [*callback_dispatch.contributed(self.components()), *privacy,
                      *self.configured]
        self.run_callbacks = callback_dispatch.chain(self.builtins, components, self.callbacks,
                                                     signal)
        result = Result(self.cfg.resolved(), self.cfg.config_hash(), self.history,
                        self.client_tables, skipped_metrics=dict(self.skipped_metrics))
        for cb in self.run_callbacks:
            cb.on_run_start(self.view)
        stopping.check(self.round)  # no round starts once a stop was requested
        total = self.cfg.rounds
        while self.round < total:
            r = self.round + 1
            sampled = self.sample_clients(r)
            order = order_fn(list(map(int, sampled))) if order_fn else None
            outcome = self.play_round(r, sampled, order)
            self.round = r
            record = RoundRecord(r, outcome.metrics, self.view, sampled, outcome.client_values)
            result.history.append({"round": r, **outcome.metrics})
            callback_dispatch.end_round(self.run_callbacks, record, result.history[-1],
                                        result.client_tables, self.builtins)
            if record.checkpoint:  # a callback's verdict (the built-in checkpoint's)
                self.save_checkpoint()
            if record.stop is not None and r < total:
                result.stopped = record.stop
                break
            if record.converged is not None:
                result.converged = record.converged
                log.info("%s", record.converged)
                break
        if signal.reason is not None and result.stopped is not None:
            raise stopping.StopRequested(signal.reason)
        callback_dispatch.end_run(self.run_callbacks, result)
        if self.cfg.checkpoint_every and result.stopped is None:
            checkpoint.remove(checkpoint.run_folder(self.cfg))
        return result

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs (``fedcore.core.round.run_state.state_of``)."""
        return run_state.state_of(self)

    def load_state_dict(self, state: dict[str, Any], rng: bool = True) -> None:
        """Restore ``state_dict``, checked first (``fedcore.core.round.run_state.restore``)."""
        run_state.restore(self, state, rng)

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
    """Run one simulation of ``cfg``, untracked.

    Args:
        cfg: the experiment (``load_config`` / ``build_config``).
        callbacks: extra callbacks (``fedcore.core.callbacks``), after the built-in ones.
        data: own federated data (``fedcore.core.data.own``) instead of the config's dataset.
        model: own model (an ``nn.Module`` class, a factory or an instance).

    Returns:
        The run's history, per-client tables and summary.
    """
    return Simulation(cfg, callbacks, data=data, model=model).run()
