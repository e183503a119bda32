"""The round loop: sample, train locally, stack deltas, aggregate, step, evaluate
(docs/explanation/architecture.md)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from fedcore import aggregators, checkpoint, clients, code_digest, compression, stopping
from fedcore.adversaries import attack_update, choose_clients
from fedcore.aggregators import Aggregate, UpdateBatch
from fedcore.aggregators.base import REGISTRY as RULES
from fedcore.bn_statistics import average_bn_statistics
from fedcore.callbacks import Callback
from fedcore.clients import ClientData, ClientUpdate, LocalSchedule
from fedcore.compression.base import side_bytes
from fedcore.config import ConfigError, ExperimentConfig
from fedcore.data.federated import FederatedData, build_federated_data
from fedcore.data.own import config_with_data
from fedcore.device_check import check_device_present
from fedcore.engines import sequential
from fedcore.engines.select import build_engine
from fedcore.layout import ParamLayout, flat_params, load_flat_params
from fedcore.limits import shown
from fedcore.metrics import (
    client_stat_metrics,
    conflict_fraction,
    eval_with_embeddings,
    fairness_summary,
    label_mix_accuracy,
    per_sample_eval,
    representation_stats,
)
from fedcore.model_check import check_model
from fedcore.models.external import ModelArg, config_with_model, instantiate
from fedcore.models.protocol import REPR_METRICS, has_embedding
from fedcore.round_context import RoundContext
from fedcore.schedules import local_lr
from fedcore.seeding import GLOBAL_RNG_LOCK, derive_seed, numpy_rng
from fedcore.store import ClientStore

if TYPE_CHECKING:
    import pandas as pd

    from fedcore.models import FedModel

__all__ = ["Callback", "ClientStore", "ClientTable", "Result", "Simulation", "run"]

log = logging.getLogger("fedcore")

# What Simulation.state_dict holds (round protocol v2); a checkpoint lacking one cannot resume.
STATE_KEYS = (
    "config_hash", "round", "bytes_up_total", "bytes_down_total", "params", "buffers",
    "aggregator", "store", "history", "client_tables", "rng",
)


@dataclass
class ClientTable:
    """Per-client evaluation of one round: the global model on each client's local test split."""

    round: int
    client_id: np.ndarray
    accuracy: np.ndarray
    loss: np.ndarray
    num_samples: np.ndarray
    sampled: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Result:
    config: dict[str, Any]
    config_hash: str
    history: list[dict[str, float]] = field(default_factory=list)
    client_tables: list[ClientTable] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    skipped_metrics: dict[str, str] = field(default_factory=dict)  # pattern -> why not measured

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
class Uplink:
    """What the server received from the sampled clients, in sampled order."""

    sent: list[dict[str, torch.Tensor]]  # per client: each uplink vector after compression
    accepted: list[bool]  # every sent vector finite
    bytes_up: int


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
    ) -> None:
        """``device`` (e.g. a pinned ``cuda:1``) overrides ``cfg.device`` without changing
        the config or its hash. ``data`` (own data, see :mod:`fedcore.data.own`) and ``model``
        (an ``nn.Module``, a class or a factory) replace the config's; ``self.cfg`` then records
        them (name, source, digest), so its hash is theirs."""
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
        self.device = resolve_device(device or cfg.device)
        self.data = data or build_federated_data(cfg.dataset, cfg.seed, self.device, cfg.clients)
        self.byzantine = frozenset(
            choose_clients(
                self.data.num_clients, cfg.clients.byzantine_fraction, cfg.seed, "byzantine"
            ).tolist()
        )
        self.client_algo = clients.build(cfg.method.client)
        with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(cfg.seed, "init"))
            model = instantiate(cfg, model, self.data.in_shape, self.data.num_classes)
            check_model(model, cfg.model.name, self.client_algo,
                        RULES.get(cfg.method.aggregator["rule"]))
            # any nn.Module; what the method calls beyond model(x) was checked just above
            fed_model = cast("FedModel", model)
            self.client_algo.prepare_model(fed_model)
            self.model = fed_model.to(self.device)
        self.layout = ParamLayout.from_model(self.model)
        self.params = flat_params(self.model)
        self.buffers = {k: v.detach().clone() for k, v in self.model.named_buffers()}
        self.aggregator = aggregators.build(cfg.method.aggregator)
        self.aggregator.setup(self.data.num_clients, self.layout)
        self.compressor = compression.build(cfg.method.compression)
        self.engine, self.engine_name, self.engine_reason = build_engine(
            cfg, self.model, self.layout, tuple(self.data.in_shape), self.device
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
        rng = numpy_rng(self.cfg.seed, "sample", round)
        chosen = rng.choice(self.data.num_clients, self.cfg.clients_per_round, replace=False)
        return np.sort(chosen)

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
        return RoundContext(
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
            start_point=lambda k, steps: self.compressor.start_point(
                self.params, self.store[k], steps
            ),
            needs_num_steps=self.compressor.needs_num_steps,
        )

    def train_client(self, client_id: int, round: int) -> ClientUpdate:
        """One client's update, trained on its own (the sequential engine's unit)."""
        return sequential.train_client(self.round_context(round), client_id)

    def run_round(self, round: int, order: list[int] | None = None) -> dict[str, float]:
        """Play one round and return its metrics."""
        return self.play_round(round, order).metrics

    def play_round(self, round: int, order: list[int] | None = None) -> RoundOutcome:
        """configure -> train -> uplink -> aggregate -> commit -> apply, as named phases."""
        sampled = list(map(int, self.sample_clients(round)))
        rc = self.round_context(round)
        self.compressor.begin_round(round, rc.schedule)
        probe = self.compressor.probe(rc, sampled)
        updates = self.engine.train_round(rc, sampled, order)
        self._note_fallback()
        for cid in self.byzantine.intersection(sampled):
            attack(rc, updates[cid])
        ups = [updates[cid] for cid in sampled]
        reject_non_finite_scalars(ups, self.aggregator.needs, round)
        uplink = self.transmit(rc, ups)
        kept = [u for u, ok in zip(ups, uplink.accepted, strict=True) if ok]
        batch = self.update_batch(rc, ups, uplink)
        result, agg_seconds = self.aggregate(batch)
        for up, sent, ok in zip(ups, uplink.sent, uplink.accepted, strict=True):
            self.client_algo.commit(self.store[up.client_id], up, sent, ok)
        closing = self.compressor.end_round(sampled, self.store)
        self.params = self.params + result.step
        if closing.step is not None:  # a stage's extra server step (CSER's digest mean)
            self.params = self.params + closing.step
        self._average_buffers(kept)
        bytes_down = len(sampled) * sum(
            v.numel() * v.element_size() for v in (rc.params, *rc.downlink.values())
        )
        self.bytes_up_total += uplink.bytes_up
        self.bytes_down_total += bytes_down
        n = torch.tensor([float(u.num_samples) for u in ups])
        train_loss = float((torch.stack([u.train_loss for u in ups]).cpu() * n).sum() / n.sum())
        per_client = batch.deltas if result.client_deltas is None else result.client_deltas
        metrics = {
            "train/loss": train_loss,
            "agg/conflict_fraction": conflict_fraction(per_client, result.step) if kept else 0.0,
            "agg/rejected_clients": float(len(ups) - len(kept)),
            "agg/seconds": agg_seconds,
            "comm/bytes_up": float(uplink.bytes_up),
            "comm/bytes_up_total": float(self.bytes_up_total),
            "comm/bytes_down": float(bytes_down),
            "comm/bytes_down_total": float(self.bytes_down_total),
        }
        metrics.update(result.metrics)
        metrics.update(closing.metrics)
        metrics.update(probe)
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

    def transmit(self, rc: RoundContext, ups: list[ClientUpdate]) -> Uplink:
        """Uplink phase: each client's named vectors through the compressor (``delta`` with its
        error feedback), their bytes, and acceptance (every sent vector finite)."""
        names = self.client_algo.uplink
        sent_all, accepted, total = [], [], 0
        for up in ups:
            gen = None
            if self.compressor.randomized:
                seed = derive_seed(self.cfg.seed, "compress", rc.round, up.client_id)
                gen = torch.Generator().manual_seed(seed)
            sent: dict[str, torch.Tensor] = {}
            for name in names:
                if name == "delta":
                    vec, nbytes = self.compressor.compress(up.delta, self.store[up.client_id], gen)
                else:
                    vec, nbytes = self.compressor.apply(up.extras[name], gen)
                sent[name] = vec
                total += nbytes
            total += side_bytes(up.buffers)  # n_k and BatchNorm statistics
            sent_all.append(sent)
            accepted.append(all(bool(torch.isfinite(v).all()) for v in sent.values()))
        if not all(accepted):
            bad = [u.client_id for u, ok in zip(ups, accepted, strict=True) if not ok]
            log.warning(
                "round %d: NaN or Inf in the update of client(s) %s; excluded", rc.round, bad
            )
        return Uplink(sent_all, accepted, total)

    def update_batch(
        self, rc: RoundContext, ups: list[ClientUpdate], uplink: Uplink
    ) -> UpdateBatch:
        """The accepted clients' vectors stacked as m x d matrices (zeros when no delta is sent)."""
        rows = [i for i, ok in enumerate(uplink.accepted) if ok]
        kept = [ups[i] for i in rows]
        names = self.client_algo.uplink
        if not kept:
            deltas = self.params.new_zeros((0, self.layout.dim))
        elif "delta" in names:
            deltas = torch.stack([uplink.sent[i]["delta"] for i in rows])
        else:
            deltas = self.params.new_zeros((len(rows), self.layout.dim))
        extras = {
            name: torch.stack([uplink.sent[i][name] for i in rows])
            for name in names
            if name != "delta" and rows
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
                [u.buffers for u in ups], w / w.sum(), self.compressor.moment_matched_bn
            )
        )

    def evaluate(
        self,
        round: int,
        sampled: np.ndarray,
        client_values: dict[str, np.ndarray] | None = None,
    ) -> tuple[dict[str, float], ClientTable]:
        """Evaluate phase: the rule's evaluation point on the global test set and on every
        client's local test split (none, ``test_fraction`` 0: the global per-class accuracy
        weighted by each client's label mix), plus the client objective's own columns (Ditto)."""
        params = self.aggregator.eval_params(self.params)
        load_flat_params(self.model, params)
        if self.buffers:
            self.model.load_state_dict(self.buffers, strict=False)
        if REPR_METRICS in self.skipped_metrics:
            correct, loss = per_sample_eval(self.model, self.data.x_test, self.data.y_test)
        else:
            correct, loss, z = eval_with_embeddings(self.model, self.data.x_test, self.data.y_test)
        metrics = {"test/accuracy": float(correct.float().mean()), "test/loss": float(loss.mean())}
        if REPR_METRICS not in self.skipped_metrics:
            metrics.update(representation_stats(z, self.data.y_test))
        n_clients = self.data.num_clients
        has_test = np.array([len(c.y_test) > 0 for c in self.data.clients])
        if has_test.any():
            c_correct, c_loss = per_sample_eval(self.model, self._eval_x, self._eval_y)
            owner = self._eval_owner.to(c_correct.device)
            counts = torch.bincount(owner, minlength=n_clients).clamp_min(1).double()
            acc = (torch.bincount(owner, c_correct.double(), minlength=n_clients) / counts).cpu()
            cl = (torch.bincount(owner, c_loss.double(), minlength=n_clients) / counts).cpu()
        else:  # no local test splits (test_fraction 0): the global test set by label mix
            mix = self.data.label_mix()
            acc, cl = (t.cpu() for t in label_mix_accuracy(correct, loss, self.data.y_test, mix))
            has_test = np.ones(n_clients, dtype=bool)
        acc_np = acc.numpy()
        metrics.update(fairness_summary(acc_np[has_test]))
        own = self.client_algo.evaluate_clients(self.round_context(round))
        for name, column in own.items():
            if name.endswith("_accuracy"):
                metrics.update(fairness_summary(column[has_test], name.removesuffix("_accuracy")))
        if params is not self.params:
            load_flat_params(self.model, self.params)
        table = ClientTable(
            round=round,
            client_id=np.arange(n_clients),
            accuracy=acc_np,
            loss=cl.numpy(),
            num_samples=np.array([c.num_train for c in self.data.clients]),
            sampled=np.isin(np.arange(n_clients), sampled),
            extra={
                "noisy": np.isin(np.arange(n_clients), self.data.noisy_clients),
                "byzantine": np.isin(np.arange(n_clients), sorted(self.byzantine)),
                **(client_values or {}),
                **own,
            },
        )
        return metrics, table

    def run(self, order_fn: Callable[[list[int]], list[int]] | None = None) -> Result:
        """Run all remaining rounds; rounds are numbered 1..R (the MLflow step).

        A requested stop (:mod:`fedcore.stopping`, e.g. SIGTERM) ends the run at the next round
        boundary with :class:`~fedcore.stopping.StopRequested`: the rounds done are reported and
        checkpointed as usual, the round in flight is finished first."""
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(
                    f"callback {type(cb).__name__} is not a fedcore.callbacks.Callback subclass"
                )
        result = Result(
            self.cfg.resolved(), self.cfg.config_hash(), self.history, self.client_tables,
            skipped_metrics=dict(self.skipped_metrics),
        )
        for cb in self.callbacks:
            cb.on_run_start(self)
        total = self.cfg.rounds
        every = self.cfg.checkpoint_every
        while self.round < total:
            if stopping.requested() and every and self.round % every:
                self.save_checkpoint()  # resume from the round the stop came after
            stopping.check(self.round)
            r = self.round + 1
            sampled = self.sample_clients(r)
            order = order_fn(list(map(int, sampled))) if order_fn else None
            outcome = self.play_round(r, order)
            metrics = outcome.metrics
            table = None
            if r % self.cfg.eval_every == 0 or r == total:
                eval_metrics, table = self.evaluate(r, sampled, outcome.client_values)
                metrics.update(eval_metrics)
                result.client_tables.append(table)
            self.round = r
            result.history.append({"round": r, **metrics})
            for cb in self.callbacks:
                cb.on_round_end(r, metrics, table)
            reason = divergence(r, metrics, self.cfg.clients_per_round)
            if reason:
                raise FloatingPointError(reason)
            if every and (r % every == 0 or r == total):
                self.save_checkpoint()
        result.summary = summarize(result.history, self.cfg.target_accuracy)
        for cb in self.callbacks:
            cb.on_run_end(result)
        if self.cfg.checkpoint_every:
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
        self.round = int(state["round"])
        self.bytes_up_total = int(state["bytes_up_total"])
        self.bytes_down_total = int(state["bytes_down_total"])
        self.params = state["params"].to(self.device)
        self.buffers = {k: v.to(self.device) for k, v in state["buffers"].items()}
        self.aggregator.load_state_dict(state["aggregator"])
        self.store.load_state_dict(state["store"])
        self.history[:] = [dict(h) for h in state["history"]]
        self.client_tables[:] = [ClientTable(**t) for t in state["client_tables"]]
        if rng:
            checkpoint.set_rng_state(state["rng"])

    def save_checkpoint(self) -> None:
        """Write this round's checkpoint and tell the callbacks its path."""
        path = checkpoint.save(self.state_dict(), checkpoint.run_folder(self.cfg), self.round,
                               code=code_digest.of_config(self.cfg))
        for cb in self.callbacks:
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


def attack(rc: RoundContext, update: ClientUpdate) -> None:
    """A Byzantine client's update replaced by its attack, as the server sees it: EVERY vector
    it sends (``client_algo.uplink``), in uplink order, from the attack's own stream."""
    how, strength = rc.cfg.clients.attack, rc.cfg.clients.attack_strength
    seed = derive_seed(rc.cfg.seed, "attack", rc.round, update.client_id)
    generator = torch.Generator().manual_seed(seed)
    for name in rc.client_algo.uplink:
        if name == "delta":
            update.delta = attack_update(update.delta, how, strength, generator)
        else:
            update.extras[name] = attack_update(update.extras[name], how, strength, generator)


def reject_non_finite_scalars(ups: list[ClientUpdate], needs: frozenset[str], round: int) -> None:
    """A client whose scalar for the server (``loss_before``, ``oui``, ...) is NaN or Inf gets
    a NaN delta, so that it is rejected exactly like a non-finite update (its error-feedback
    residual kept, counted in ``agg/rejected_clients``)."""
    for up in ups:
        bad = sorted(k for k in needs if k in up.stats and not math.isfinite(up.stats[k]))
        if bad:
            log.warning("round %d: client %d sent non-finite %s", round, up.client_id, bad)
            up.delta = torch.full_like(up.delta, math.nan)


def divergence(round: int, metrics: dict[str, float], sampled: int) -> str | None:
    """Why the run diverged this round, or None.

    A non-finite global test loss, or a non-finite train loss with every sampled update
    non-finite (a single client's NaN update is excluded and the run goes on).
    """
    test = metrics.get("test/loss", 0.0)
    if not math.isfinite(test):
        return f"diverged at round {round}: test/loss is {test}"
    train = metrics["train/loss"]
    if not math.isfinite(train) and metrics["agg/rejected_clients"] >= sampled:
        return f"diverged at round {round}: train/loss is {train} and every update is non-finite"
    return None


def personal_summary(last: dict[str, float]) -> dict[str, float]:
    """final/personal_* of a personalised method: its personal models at the last evaluation
    (mean, worst-10 %, std over clients and Jain's index); empty for other methods."""
    if "personal/accuracy_mean" not in last:
        return {}
    return {
        "final/personal_accuracy_mean": last["personal/accuracy_mean"],
        "final/personal_accuracy_worst10": last["personal/accuracy_worst10"],
        "final/personal_accuracy_std": last["personal/accuracy_std"],
        "final/personal_jain": last["personal/jain_index"],
    }


def auc_trapz(accuracy: list[float]) -> float:
    """FedOUI's AUC: trapz(acc) / (R - 1) over the R evaluated accuracies (unit spacing), the
    area under the curve over its span; the one accuracy itself when R = 1."""
    if len(accuracy) == 1:
        return float(accuracy[0])
    a = np.asarray(accuracy, dtype=float)
    return float(np.sum((a[1:] + a[:-1]) / 2) / (len(a) - 1))


def summarize(history: list[dict[str, float]], target: float | None) -> dict[str, float]:
    evals = [h for h in history if "test/accuracy" in h]
    last = evals[-1]
    out = {
        "final/accuracy": last["test/accuracy"],
        "final/loss": last["test/loss"],
        "final/accuracy_worst10": last["clients/accuracy_worst10"],
        "final/accuracy_std": last["clients/accuracy_std"],
        "final/accuracy_mean_clients": last["clients/accuracy_mean"],
        "auc/accuracy": float(np.mean([h["test/accuracy"] for h in evals])),
        "auc/accuracy_trapz": auc_trapz([h["test/accuracy"] for h in evals]),
        **personal_summary(last),
    }
    if target is not None:
        hit = [h["round"] for h in evals if h["test/accuracy"] >= target]
        if hit:
            out["rounds_to_target"] = float(hit[0])
    return out


def run(
    cfg: ExperimentConfig,
    callbacks: list[Callback] | tuple[Callback, ...] = (),
    data: FederatedData | None = None,
    model: ModelArg | None = None,
) -> Result:
    """Run one simulation of ``cfg`` (with own ``data`` or ``model``), reporting to
    ``callbacks``."""
    return Simulation(cfg, callbacks, data=data, model=model).run()
