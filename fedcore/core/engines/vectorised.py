"""The vectorised engine: a chunk of clients trains at once with ``vmap(grad(...))``.

Every client is prepared and finished by the shared template (``fedcore.core.clients.template``);
this engine only executes the SGD steps of the plans. It runs each plan's ``loss`` (the
definition the sequential engine runs) on a functional view of the model, with a ``BatchMask``
for padded rows, and steps with the one SGD (``fedcore.core.clients.sgd``) on the stacked flat
parameters. Each client gets exactly the batches, dropout masks and SGD steps of the sequential
engine: batches are its plan's, dropout masks are drawn up front from its own seeded RNG stream
in the order the sequential forward passes draw them, and a client that has run out of steps
(or a row past a partial batch) is masked. The deltas are the rows of the m x d update matrix.

A plan's frozen models are functional views in eval mode: the round's global parameters are
shared by the chunk (not vmapped), every other frozen model is stacked per client and vmapped
with the client. A plan's follow-up pass trains after every client's update, stacked the same
way.

This module plans a round (groups, chunks, fallback) and holds the engine's state; its parts:
``functional`` (the model's functional view, dropout masks given per call), ``chunk_inputs``
(a chunk's padded batches, masks and replayed dropout noise), ``loss_context`` (the shared
context and frozen models the traced loss reads) and ``chunk_step`` (the vmapped gradient and
the SGD steps of a chunk).
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import replace
from typing import cast

import torch
from torch import nn

from fedcore.core.clients import ClientAlgorithm
from fedcore.core.clients import template as tpl
from fedcore.core.clients.template import local_context
from fedcore.core.engines import sequential
from fedcore.core.engines.buckets import Passes, bucketed_passes, chunk_order, segments
from fedcore.core.engines.chunk_inputs import ChunkClient, chunk_inputs
from fedcore.core.engines.chunk_step import run_steps, vmapped_step
from fedcore.core.engines.functional import (
    DropoutFeed,
    FunctionalModel,
    Parts,
    activation_numel,
    dropout_calls,
    functional_twin,
)
from fedcore.core.engines.loss_context import frozen_params, shared_context
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.models import FedModel
from fedcore.core.models.layout import ParamLayout, load_flat_params
from fedcore.core.records import ClientUpdate

log = logging.getLogger("fedcore")

NAME = "vectorised"
EFFICIENCY = "engine/padding_efficiency"
USEFUL, EXECUTED = "engine/useful_passes", "engine/executed_passes"
CPU_MEMORY_SHARE = 0.25  # share of available RAM a chunk may use on CPU
CUDA_MEMORY_SHARE = 0.5  # share of free device memory a chunk may use on CUDA


# The overrides of a tiny run that emits these metrics (fedcore.core.metrics.catalogue).
EMITTED_WHEN = ["engine=vectorised"]

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "engine/padding_efficiency": (
            "vectorised engine: useful / executed client-sample passes of the round's local "
            "training (a ragged batch is padded to its chunk's widest batch: the padded rows "
            "are executed, not useful; 1 = no padding); only in rounds it trained vectorised"
        ),
        "engine/useful_passes": (
            "vectorised engine: the round's real batch rows over all local steps"
        ),
        "engine/executed_passes": (
            "vectorised engine: the batch rows its vmapped steps ran, padding included"
        ),
    },
}


def model_blocker(model: nn.Module) -> str | None:
    """Why ``model`` cannot be vmapped with per-client dropout masks; None when it can."""
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._NormBase) and mod.track_running_stats:
            return f"module {name} keeps running statistics (BatchNorm); use model.norm=group"
        if isinstance(mod, nn.modules.dropout._DropoutNd) and type(mod) is not nn.Dropout:
            return f"module {name} is a {type(mod).__name__}; only nn.Dropout is vectorised"
        if isinstance(mod, nn.Dropout) and mod.p >= 1.0:
            return f"module {name} is a Dropout with p=1"
    if any(True for _ in model.buffers()):
        return "the model has buffers, which the vectorised engine does not update"
    return None


def algo_blocker(algo: ClientAlgorithm) -> str | None:
    """Why ``algo`` (the object the loop holds) cannot be vectorised; None when it can."""
    reason = algo.not_vectorised_reason()
    if reason is not None:
        return f"client objective {type(algo).__name__} is not vectorised: {reason}"
    return None


class VectorisedEngine:
    """Trains the sampled clients of a round in chunks of vmapped functional SGD."""

    def __init__(
        self,
        model: FedModel,
        layout: ParamLayout,
        in_shape: tuple[int, ...],
        device: torch.device,
        max_chunk: int | None = None,
    ) -> None:
        reason = model_blocker(model)
        if reason is not None:
            raise ValueError(reason)
        self.feed = DropoutFeed()
        in_shape = tuple(in_shape)
        self.dropouts = dropout_calls(model, in_shape, device)
        self.view = FunctionalModel(functional_twin(model, self.dropouts, self.feed))
        self.slots = layout.slots
        self.act_numel = activation_numel(model, in_shape, device)
        self.in_numel = int(torch.Size(in_shape).numel())
        self.max_chunk = max_chunk
        self._frozen_parts: Parts | None = None  # an eval-mode copy for frozen models
        self.last_chunks: list[int] = []
        self.fallback_logged: str | None = None
        self.last_path: str | None = None  # what trained the last round: vectorised/sequential
        self.fallback: str | None = None  # why a round trained sequentially (kept once seen)
        self.passes = Passes()  # the last round's client-sample passes (useful, executed)
        self.compile_step = False  # torch.compile each chunk's vmapped step (benchmarks)

    def round_metrics(self) -> dict[str, float]:
        """The last round's padding metrics; none when it trained sequentially."""
        if self.last_path != NAME:
            return {}
        p = self.passes
        return {EFFICIENCY: p.efficiency, USEFUL: float(p.useful), EXECUTED: float(p.executed)}

    # -- planning ---------------------------------------------------------------------------

    def chunk_size(self, rc: RoundContext, clients: list[ChunkClient]) -> int:
        """Clients per chunk: the configured cap, else what fits the memory budget."""
        if self.max_chunk is not None:
            return self.max_chunk
        steps = max(len(c.batches) for c in clients)
        width = max((len(b) for c in clients for b in c.batches), default=1)
        drop = sum(int(torch.Size(d.shape).numel()) for d in self.dropouts)
        frozen = len(clients[0].frozen)  # stacked params and forward activations of each
        per_client = 4 * (
            (6 + frozen) * rc.layout.dim
            + width * ((3 + frozen) * self.act_numel + 2 * self.in_numel)
            + steps * width * (drop + 3)
        )
        return max(1, int(_memory_budget(rc.device) // per_client))

    # -- training ---------------------------------------------------------------------------

    def train_round(
        self, rc: RoundContext, sampled: list[int], order: list[int] | None = None
    ) -> dict[int, ClientUpdate]:
        """Every sampled client's update (``order`` is irrelevant: clients are independent).

        A client objective the engine cannot express (``not_vectorised_reason``) is trained by
        the sequential engine instead, with the reason logged once.
        """
        blocker = algo_blocker(rc.client_algo)
        if blocker is not None:
            if blocker != self.fallback_logged:
                log.info("vectorised engine: %s; training sequentially", blocker)
                self.fallback_logged = blocker
            self.last_path, self.fallback = sequential.NAME, blocker
            return sequential.train_round(rc, sampled, order)
        self.last_path, self.passes = NAME, Passes()
        algo = rc.client_algo
        preps = [tpl.prepare(algo, local_context(rc, int(cid), algo)) for cid in sampled]
        clients = [ChunkClient(p, tpl.main_pass(p)) for p in preps]
        groups: dict[tuple[int, tuple[str, ...]], list[ChunkClient]] = {}
        for client in clients:
            groups.setdefault(client.group, []).append(client)
        updates: dict[int, ClientUpdate] = {}
        self.last_chunks = []
        for members in groups.values():
            for chunk in self._chunks(rc, members):
                final, losses, steps = self._train_chunk(rc, chunk)
                deltas = final - rc.params  # the rows of the m x d update matrix
                for i, client in enumerate(chunk):
                    load_flat_params(rc.model, final[i])  # finish sees the local model
                    updates[client.ctx.data.client_id] = tpl.finish(
                        algo, client.prep, rc.model, deltas[i], losses[i], steps[i]
                    )
        self._train_follow_ups(rc, clients)
        return updates

    def _chunks(self, rc: RoundContext, members: list[ChunkClient]) -> list[list[ChunkClient]]:
        """``members`` longest first (finished clients drop off the end), in chunks that fit."""
        size = self.chunk_size(rc, members)
        order = chunk_order([len(c.batches) for c in members], size)
        chunks = [[members[i] for i in positions] for positions in order]
        self.last_chunks.extend(len(c) for c in chunks)
        return chunks

    def _train_follow_ups(self, rc: RoundContext, clients: list[ChunkClient]) -> None:
        """The plans' follow-up passes, stacked per client, after every update: each client's
        own start, batches and pull to theta_t; its dropout draws follow its main pass's, as in
        the sequential engine."""
        follow = [
            ChunkClient(c.prep, tpl.follow_up_pass(f), drawn_before=c.batches)
            for c in clients
            if (f := c.prep.plan.follow_up) is not None
        ]
        for chunk in self._chunks(rc, follow) if follow else []:
            final, _, _ = self._train_chunk(rc, chunk)
            for row, client in zip(final, chunk, strict=True):
                keep = client.prep.plan.follow_up
                assert keep is not None  # every client here has a follow-up
                keep.keep(client.ctx.state, row.clone(), {})  # no buffers: the models have none

    def _train_chunk(
        self, rc: RoundContext, chunk: list[ChunkClient]
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Train ``chunk``'s passes (one loss, schedule and mu, those of one objective):
        (final params m x d, mean train losses, steps)."""
        run = chunk[0].run
        inputs = chunk_inputs(rc, chunk, run.arity, self.dropouts)
        counts = [len(c.batches) for c in chunk]
        buckets = segments(counts)  # raises unless the clients come longest first
        real = [[run.arity * (len(b) // run.arity) if run.arity else len(b) for b in c.batches]
                for c in chunk]
        self.passes += bucketed_passes(real, int(inputs.step_index.shape[2]))
        ctx = shared_context(chunk[0].ctx)  # one traced call serves every client of the chunk
        shared, stacked = frozen_params(rc, chunk, self.slots)
        views = {name: FunctionalModel(self._frozen_view(rc)) for name in chunk[0].frozen}
        for name, tensors in shared.items():
            views[name].params = tensors
        if views:
            ctx = replace(ctx, frozen=views)
        step_grad = vmapped_step(self.feed, self.view, views, run.loss, ctx, run.arity)
        if self.compile_step:
            step_grad = torch.compile(step_grad, dynamic=True)
        try:
            params, losses = run_steps(rc, chunk, inputs, buckets, step_grad, stacked,
                                       self.slots)
        finally:
            self.feed.masks = ()
            for v in views.values():
                v.params = {}
        return params, losses, counts

    def _frozen_view(self, rc: RoundContext) -> Parts:
        """The eval-mode, gradient-free model copy that frozen views call (made once)."""
        if self._frozen_parts is None:
            twin = copy.deepcopy(rc.model).requires_grad_(False).eval()
            self._frozen_parts = Parts(cast(FedModel, twin))  # the model the engine holds
        return self._frozen_parts


def _memory_budget(device: torch.device) -> float:
    """Bytes a chunk may use: a share of free CUDA memory, or of available RAM on CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return CUDA_MEMORY_SHARE * free
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        avail = 4 << 30
    return CPU_MEMORY_SHARE * avail
