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
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedcore.core.clients import ClientAlgorithm
from fedcore.core.clients import template as tpl
from fedcore.core.clients.sgd import sgd_step
from fedcore.core.clients.template import Pass, Prepared, client_seed, local_context
from fedcore.core.component.seeding import GLOBAL_RNG_LOCK
from fedcore.core.engines import sequential
from fedcore.core.engines.buckets import Passes, bucketed_passes, chunk_order, segments
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.engines.sequential import rng_devices, seed_global_rng
from fedcore.core.models import FedModel
from fedcore.core.models.layout import ParamLayout, load_flat_params, to_device
from fedcore.core.records import BatchMask, ClientUpdate, LocalContext
from fedcore.core.records.plan import Batch

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from fedcore.core.models import ModelView

log = logging.getLogger("fedcore")

NAME = "vectorised"
EFFICIENCY = "engine/padding_efficiency"
USEFUL, EXECUTED = "engine/useful_passes", "engine/executed_passes"
CPU_MEMORY_SHARE = 0.25  # share of available RAM a chunk may use on CPU
CUDA_MEMORY_SHARE = 0.5  # share of free device memory a chunk may use on CUDA

FrozenParamDicts = dict[str, dict[str, torch.Tensor]]  # functional_call's parameters, by model name
# a chunk's inputs: x, y, per-step index, image mask, tuplet mask, and the dropout noise
ChunkTensors = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]


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


class _Feed:
    """Per-call dropout masks, set inside the vmapped function before the forward pass."""

    masks: tuple[torch.Tensor, ...] = ()


class _MaskedDropout(nn.Module):
    """``nn.Dropout`` with its noise given: ``x * noise`` as ATen's dropout computes it."""

    def __init__(self, slot: int, feed: _Feed) -> None:
        super().__init__()
        self.slot, self.feed = slot, feed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.feed.masks[self.slot]


def algo_blocker(algo: ClientAlgorithm) -> str | None:
    """Why ``algo`` (the object the loop holds) cannot be vectorised; None when it can."""
    reason = algo.not_vectorised_reason()
    if reason is not None:
        return f"client objective {type(algo).__name__} is not vectorised: {reason}"
    return None


class _Parts(nn.Module):
    """The wrapped model's forward, embedding or head, chosen per call (for functional_call)."""

    def __init__(self, model: FedModel) -> None:
        super().__init__()
        self.m = model

    def forward(self, x: torch.Tensor, part: str) -> torch.Tensor:
        if part == "embedding":
            return self.m.embedding(x)
        out: torch.Tensor = self.m.head(x) if part == "head" else self.m(x)
        return out


class FunctionalModel:
    """What an objective's ``loss`` sees inside vmap: the model API (``model(x)``,
    ``embedding``, ``head``) evaluated at this call's parameters."""

    def __init__(self, parts: _Parts) -> None:
        self.parts = parts
        self.params: dict[str, torch.Tensor] = {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x, "all")

    def embedding(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x, "embedding")

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self._call(h, "head")

    def _call(self, x: torch.Tensor, part: str) -> torch.Tensor:
        out: torch.Tensor = functional_call(self.parts, self.params, (x, part))
        return out


@dataclass(frozen=True)
class DropoutCall:
    name: str
    p: float
    shape: tuple[int, ...]  # per sample


def dropout_calls(
    model: FedModel, in_shape: tuple[int, ...], device: torch.device
) -> list[DropoutCall]:
    """The active dropout modules in the order one forward pass calls them (each once)."""
    calls: list[DropoutCall] = []
    hooks = [
        mod.register_forward_hook(
            lambda m, i, o, name=name: calls.append(DropoutCall(name, m.p, tuple(o.shape[1:])))
        )
        for name, mod in model.named_modules()
        if isinstance(mod, nn.Dropout) and mod.p > 0
    ]
    _probe(model, in_shape, device, hooks, batch=2)
    names = [c.name for c in calls]
    if len(set(names)) != len(names):
        raise ValueError(f"dropout modules called more than once per forward: {names}")
    return calls


def _activation_numel(model: FedModel, in_shape: tuple[int, ...], device: torch.device) -> int:
    """Per-sample numel of all leaf-module outputs (a bound on what backward keeps)."""
    total = [0]
    hooks = [
        mod.register_forward_hook(lambda m, i, o: total.__setitem__(0, total[0] + o[0].numel()))
        for mod in model.modules()
        if not list(mod.children())
    ]
    _probe(model, in_shape, device, hooks, batch=1)
    return total[0]


def _probe(
    model: FedModel,
    in_shape: tuple[int, ...],
    device: torch.device,
    hooks: list[RemovableHandle],
    batch: int,
) -> None:
    """One forward pass of zeros through ``model`` for its ``hooks``, which are then removed.

    Eval mode and no grad: a training-mode pass would draw dropout noise from the global RNG
    that cells in other threads share.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(batch, *in_shape, device=device))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)


@dataclass
class _Client:
    """One client's pass in a chunk: the prepared client, the pass (its plan's main pass or
    follow-up) and the batches whose dropout draws come first (the main pass's, before a
    follow-up's)."""

    prep: Prepared
    run: Pass
    drawn_before: list[torch.Tensor] = field(default_factory=list)

    @property
    def ctx(self) -> LocalContext:
        return self.prep.ctx

    @property
    def batches(self) -> list[torch.Tensor]:
        return self.run.batches

    @property
    def frozen(self) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        return self.run.frozen or {}

    @property
    def group(self) -> tuple[int, tuple[str, ...]]:
        """Clients of one chunk share the tuplet size and the frozen models' names."""
        return self.run.arity, tuple(sorted(self.frozen))


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
        self.feed = _Feed()
        in_shape = tuple(in_shape)
        self.dropouts = dropout_calls(model, in_shape, device)
        fmodel = copy.deepcopy(model).train()
        for slot, call in enumerate(self.dropouts):
            parent, _, child = call.name.rpartition(".")
            owner = fmodel.get_submodule(parent) if parent else fmodel
            setattr(owner, child, _MaskedDropout(slot, self.feed))
        self.view = FunctionalModel(_Parts(fmodel))
        self.slots = layout.slots
        self.act_numel = _activation_numel(model, in_shape, device)
        self.in_numel = int(torch.Size(in_shape).numel())
        self.max_chunk = max_chunk
        self._frozen_parts: _Parts | None = None  # an eval-mode copy for frozen models
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

    def chunk_size(self, rc: RoundContext, clients: list[_Client]) -> int:
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
        clients = [_Client(p, tpl.main_pass(p)) for p in preps]
        groups: dict[tuple[int, tuple[str, ...]], list[_Client]] = {}
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

    def _chunks(self, rc: RoundContext, members: list[_Client]) -> list[list[_Client]]:
        """``members`` longest first (finished clients drop off the end), in chunks that fit."""
        size = self.chunk_size(rc, members)
        order = chunk_order([len(c.batches) for c in members], size)
        chunks = [[members[i] for i in positions] for positions in order]
        self.last_chunks.extend(len(c) for c in chunks)
        return chunks

    def _train_follow_ups(self, rc: RoundContext, clients: list[_Client]) -> None:
        """The plans' follow-up passes, stacked per client, after every update: each client's
        own start, batches and pull to theta_t; its dropout draws follow its main pass's, as in
        the sequential engine."""
        follow = [
            _Client(c.prep, tpl.follow_up_pass(f), drawn_before=c.batches)
            for c in clients
            if (f := c.prep.plan.follow_up) is not None
        ]
        for chunk in self._chunks(rc, follow) if follow else []:
            final, _, _ = self._train_chunk(rc, chunk)
            for row, client in zip(final, chunk, strict=True):
                keep = client.prep.plan.follow_up
                assert keep is not None  # every client here has a follow-up
                keep.keep(client.ctx.state, row.clone(), {})  # no buffers: the models have none

    def _tensors(self, rc: RoundContext, chunk: list[_Client], arity: int) -> ChunkTensors:
        """Padded per-step index, masks and dropout noise of a chunk, on the device."""
        device, m = rc.device, len(chunk)
        steps = max(len(c.batches) for c in chunk)
        if arity:
            tuplets = max((len(b) // arity for c in chunk for b in c.batches), default=1)
            width = arity * tuplets
        else:
            tuplets, width = 1, max((len(b) for c in chunk for b in c.batches), default=1)
        sizes = [c.ctx.data.num_train for c in chunk]
        offsets = torch.tensor([0, *sizes[:-1]]).cumsum(0).tolist()
        index = torch.zeros(steps, m, width, dtype=torch.long)
        image_mask = torch.zeros(steps, m, width)
        tuplet_mask = torch.zeros(steps, m, tuplets)
        rows_of: list[list[torch.Tensor]] = []
        for i, c in enumerate(chunk):
            rows_i = []
            for t, idx in enumerate(c.batches):
                if arity:
                    b = len(idx) // arity
                    rows = (torch.arange(arity)[:, None] * tuplets + torch.arange(b)).reshape(-1)
                    tuplet_mask[t, i, :b] = 1.0
                else:
                    rows = torch.arange(len(idx))
                index[t, i, rows] = idx + offsets[i]
                image_mask[t, i, rows] = 1.0
                rows_i.append(rows)
            rows_of.append(rows_i)
        noise = [torch.zeros(steps, m, width, *d.shape, device=device) for d in self.dropouts]
        if self.dropouts:
            for i, c in enumerate(chunk):
                seed = client_seed(rc, c.ctx.data.client_id)
                with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=rng_devices(rc)):
                    seed_global_rng(rc, seed)
                    for idx in c.drawn_before:  # the draws an earlier phase made
                        for d in self.dropouts:
                            F.dropout(torch.ones(len(idx), *d.shape, device=device), d.p, True)
                    for t, rows in enumerate(rows_of[i]):
                        rows = rows.to(device)
                        for k, d in enumerate(self.dropouts):
                            ones = torch.ones(len(rows), *d.shape, device=device)
                            noise[k][t, i, rows] = F.dropout(ones, d.p, training=True)
        x = torch.cat([c.ctx.data.x_train for c in chunk])
        y = torch.cat([c.ctx.data.y_train for c in chunk])
        return (x, y, to_device(index, device), to_device(image_mask, device),
                to_device(tuplet_mask, device), noise)

    def _train_chunk(
        self, rc: RoundContext, chunk: list[_Client]
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Train ``chunk``'s passes (one loss, schedule and mu, those of one objective):
        (final params m x d, mean train losses, steps)."""
        device, m = rc.device, len(chunk)
        run = chunk[0].run
        sched, arity, loss_of = run.schedule, run.arity, run.loss
        x_all, y_all, index, image_mask, tuplet_mask, noise = self._tensors(rc, chunk, arity)
        counts = [len(c.batches) for c in chunk]
        buckets = segments(counts)  # raises unless the clients come longest first
        real = [[arity * (len(b) // arity) if arity else len(b) for b in c.batches]
                for c in chunk]
        self.passes += bucketed_passes(real, int(index.shape[2]))
        ctx = shared_context(chunk[0].ctx)  # one traced call serves every client of the chunk
        feed, view = self.feed, self.view
        shared, stacked = self._frozen_params(rc, chunk)
        views = {name: FunctionalModel(self._frozen_view(rc)) for name in chunk[0].frozen}
        for name, tensors in shared.items():
            views[name].params = tensors
        if views:
            ctx = replace(ctx, frozen=views)

        def one_client(
            params: dict[str, torch.Tensor],
            x: torch.Tensor,
            y: torch.Tensor,
            img_mask: torch.Tensor,
            tup_mask: torch.Tensor,
            masks: tuple[torch.Tensor, ...],
            frozen: FrozenParamDicts,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            feed.masks = masks
            view.params = params
            for name, tensors in frozen.items():  # this client's row of each stacked model
                views[name].params = tensors
            mask = BatchMask(img_mask, tup_mask if arity else None)
            loss = loss_of(Batch(cast("ModelView", view), x, y, ctx, mask, arity))
            feed.masks, view.params = (), {}  # no transformed tensor outlives the call
            for name in frozen:
                views[name].params = {}
            return loss, loss.detach()

        step_grad = vmap(grad(one_client, has_aux=True))
        if self.compile_step:
            step_grad = torch.compile(step_grad, dynamic=True)
        mu = run.mu
        anchors = [rc.params] if mu else None
        shift_rows = [c.run.shift for c in chunk if c.run.shift is not None]  # all or none
        shift = torch.stack(shift_rows).to(device) if shift_rows else None
        params = torch.stack([c.run.start for c in chunk]).to(device)
        buf: torch.Tensor | None = None  # momentum, rows = clients still training
        loss_sum = torch.zeros(m, device=device)
        rows = image_mask.sum(2)  # steps x m: real rows of each client's batch (exact counts)
        seen = rows.sum(0)
        for seg in buckets:  # a bucket leaves the batch after its last step
            k = seg.clients  # the clients still training: a prefix (longest first)
            p = params[:k]
            for t in range(seg.start, seg.stop):
                idx = index[t, :k]
                tensors = self._views(p)
                frozen = {name: self._views(f[:k]) for name, f in stacked.items()}
                grads, loss = step_grad(
                    tensors, x_all[idx], y_all[idx], image_mask[t, :k], tuplet_mask[t, :k],
                    tuple(n[t, :k] for n in noise), frozen,
                )
                g = torch.cat([grads[f"m.{s.name}"].reshape(k, -1) for s in self.slots], dim=1)
                bufs = [None if buf is None else buf[:k]]  # views: updated in place
                shifts = None if shift is None else [shift[:k]]
                sgd_step([p], [g], bufs, sched, mu, anchors, shifts)  # p: view of params[:k]
                buf = bufs[0] if buf is None else buf
                loss_sum[:k] += loss * rows[t, :k]
        feed.masks = ()
        for v in views.values():
            v.params = {}
        return params, loss_sum / seen.clamp_min(1.0), counts

    def _views(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """functional_call's parameter dict of stacked flat params (k x d -> k x shape each)."""
        k = rows.shape[0]
        return {f"m.{s.name}": rows[:, s.start : s.stop].view(k, *s.shape) for s in self.slots}

    def _frozen_view(self, rc: RoundContext) -> _Parts:
        """The eval-mode, gradient-free model copy that frozen views call (made once)."""
        if self._frozen_parts is None:
            twin = copy.deepcopy(rc.model).requires_grad_(False).eval()
            self._frozen_parts = _Parts(cast(FedModel, twin))  # the model the engine holds
        return self._frozen_parts

    def _frozen_params(
        self, rc: RoundContext, chunk: list[_Client]
    ) -> tuple[FrozenParamDicts, dict[str, torch.Tensor]]:
        """The chunk's frozen models: (shared parameter dicts, stacked m x d tensors) by name.

        A frozen model whose params are the round's global params for every client is shared
        (one copy, not vmapped); any other is stacked with one row per client.
        """
        shared: FrozenParamDicts = {}
        stacked: dict[str, torch.Tensor] = {}
        for name in chunk[0].frozen:
            rows = [c.frozen[name][0] for c in chunk]
            if all(r is rc.params for r in rows):
                shared[name] = {
                    f"m.{s.name}": rc.params[s.start : s.stop].view(s.shape) for s in self.slots
                }
            else:
                stacked[name] = torch.stack(rows).to(rc.device)
        return shared, stacked


class PerClientField:
    """Stands in for a per-client field of the context a vmapped loss gets: the loss is traced
    once for the whole chunk, so it must not read one client's data, state or generator (it
    would silently get the chunk's first client's). Any use raises, naming the field."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"a vectorised loss read ctx.{self._name}, which differs per client; the engine "
            "traces one call for a chunk of clients: pass per-client values as frozen models "
            "or a gradient shift, or set vectorisable = False"
        )

    def __getattr__(self, attr: str) -> None:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()

    __getitem__ = __contains__ = __iter__ = __len__ = __bool__ = __call__ = _refuse


PER_CLIENT = ("data", "state", "generator", "start_params")


def shared_context(ctx: LocalContext) -> LocalContext:
    """``ctx`` with its per-client fields replaced by ``PerClientField`` guards: what the
    chunk's clients share (global params, layout, schedule, round, downlink, frozen models)."""
    guards: dict[str, object] = {name: PerClientField(name) for name in PER_CLIENT}
    return replace(ctx, **guards)  # type: ignore[arg-type]


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
