"""Local training: the client interface and the SGD loop every client objective shares."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import torch
from torch import nn

from fedcore.clients.sgd import sgd_step
from fedcore.data.client_data import ClientData as ClientData
from fedcore.layout import ParamLayout, flat_params, load_flat_params
from fedcore.registry import HParams as BaseHParams
from fedcore.registry import Registry
from fedcore.requirements import Need

if TYPE_CHECKING:
    from fedcore.models import FedModel, ModelView
    from fedcore.round_context import RoundContext

REGISTRY: Registry[ClientAlgorithm] = Registry(
    "client algorithm", "algorithm", "fedcore.clients", "fedcore.clients.base:ClientAlgorithm"
)
register = REGISTRY.register


FrozenParams = tuple[torch.Tensor, dict[str, torch.Tensor]]  # flat params, buffers


@dataclass(frozen=True)
class LocalSchedule:
    """How long and how fast a client trains in one round (the ``local`` config block)."""

    epochs: int = 1
    steps: int | None = None
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class LocalContext:
    """Everything a client sees in one round."""

    model: nn.Module
    global_params: torch.Tensor
    global_buffers: dict[str, torch.Tensor]
    layout: ParamLayout
    data: ClientData
    schedule: LocalSchedule
    state: dict[str, Any]
    generator: torch.Generator
    round: int
    needs: frozenset[str] = frozenset()
    start_params: torch.Tensor | None = None  # where SGD starts (step-ahead EF); None: global
    server_payload: Mapping[str, torch.Tensor] = field(default_factory=dict)  # the downlink
    seed: int = 0  # the experiment seed (FedOUI's probe seed)
    # The objective's ``frozen_models`` while it trains, set by the engine: gradient-free models
    # in eval mode with the model API (``model(x)``, ``embedding``, ``head``).
    frozen: Mapping[str, ModelView] = field(default_factory=dict)

    def global_tensors(self) -> list[torch.Tensor]:
        """The global parameters as views shaped like ``model.parameters()``, in order."""
        return [self.global_params[s.start : s.stop].view(s.shape) for s in self.layout.slots]


@dataclass(frozen=True)
class BatchMask:
    """Which rows of a padded batch are real (the vectorised engine pads clients to one shape).

    ``rows``: 1 for a real sample; ``tuplets``: 1 for a real tuplet (tuplet objectives). The
    sequential engine passes no mask: every row is real.
    """

    rows: torch.Tensor
    tuplets: torch.Tensor | None = None


def batch_mean(values: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the batch, or over the rows with weight 1 (0 for no rows) when masked."""
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp_min(1.0)


def cross_entropy(
    logits: torch.Tensor, y: torch.Tensor, mask: BatchMask | None = None
) -> torch.Tensor:
    """The batch's mean cross-entropy (over the real rows when masked)."""
    if mask is None:
        return nn.functional.cross_entropy(logits, y)
    return batch_mean(nn.functional.cross_entropy(logits, y, reduction="none"), mask.rows)


@dataclass
class PersonalTraining:
    """A client's second model, trained after its global update (Ditto's v_k): the one
    definition both engines execute. SGD from ``start`` over ``batches`` with ``schedule`` on
    ``loss``, pulled to the round's global model by the shared SGD's proximal term
    ``mu (v - theta_t)``; ``keep(state, params, buffers)`` stores the result."""

    start: torch.Tensor
    buffers: dict[str, torch.Tensor]
    schedule: LocalSchedule
    batches: list[torch.Tensor]
    mu: float
    loss: Callable[..., torch.Tensor]  # (model, x, y, ctx, mask=None), as ClientAlgorithm.loss
    keep: Callable[[dict[str, Any], torch.Tensor, dict[str, torch.Tensor]], None]


@dataclass
class ClientUpdate:
    """What a client sends back (before compression)."""

    client_id: int
    delta: torch.Tensor
    num_samples: int
    num_steps: int
    train_loss: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # extra uplink d-vectors
    pending: dict[str, torch.Tensor] = field(default_factory=dict)  # state to commit, not sent


def minibatches(
    n: int, schedule: LocalSchedule, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Index batches: ``steps`` batches if set, else ``epochs`` shuffled passes over n samples."""
    bs = min(schedule.batch_size, n)
    if schedule.steps is not None:
        per_epoch = max(n // bs, 1)
        epochs = -(-schedule.steps // per_epoch)
    else:
        epochs = schedule.epochs
    count = 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, bs):
            idx = perm[start : start + bs]
            if schedule.steps is not None and len(idx) < bs and n >= bs:
                continue
            yield idx
            count += 1
            if schedule.steps is not None and count >= schedule.steps:
                return


class ClientAlgorithm:
    """Base client: plain local SGD on cross-entropy. Objectives override ``loss`` or hooks."""

    name: ClassVar[str]
    HParams: ClassVar[type[BaseHParams]] = BaseHParams
    hp: BaseHParams
    uplink: tuple[str, ...] = ("delta",)  # the vectors sent: "delta" and/or named extras
    personalized: ClassVar[bool] = False  # keeps personal models (``personal_params``), Ditto
    # The vectorised engine vmaps ``loss`` (with a BatchMask) for objectives that set this; the
    # others give ``not_vectorised`` as the reason they train sequentially.
    vectorisable: ClassVar[bool] = False
    not_vectorised: ClassVar[str] = "its loss has not been written for padded batches"
    # what ``loss`` and ``prepare_model`` call beyond ``model(x)`` (fedcore.models.protocol)
    model_needs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, hparams: BaseHParams | None = None) -> None:
        self.hp = hparams if hparams is not None else self.HParams()

    def not_vectorised_reason(self) -> str | None:
        """Why this objective (with its hparams) trains sequentially; None: it vectorises."""
        return None if self.vectorisable else self.not_vectorised

    @property
    def global_objective(self) -> ClientAlgorithm:
        """The objective whose local training gives the global update (Ditto: its ``inner``);
        the vectorised engine runs its loss, batches and hooks."""
        return self

    def personal_training(self, ctx: LocalContext) -> PersonalTraining | None:
        """This client's personal-model training after the global update (drawing its batches
        from ``ctx.generator``); None: no personal model (every objective but Ditto)."""
        return None

    def loss(
        self,
        model: ModelView,
        x: torch.Tensor,
        y: torch.Tensor,
        ctx: LocalContext,
        mask: BatchMask | None = None,
    ) -> torch.Tensor:
        """The objective of one batch: the one definition both engines execute (the vectorised
        one passes a functional model view and a mask; see ``vectorisable``)."""
        return cross_entropy(model(x), y, mask)

    @property
    def proximal_mu(self) -> float:
        """mu of a proximal term (mu/2)||w - theta_t||^2, applied by the shared SGD step."""
        return 0.0

    def gradient_shift(self, ctx: LocalContext) -> torch.Tensor | None:
        """A constant flat d-vector added to every step's gradient this round (the local
        objective gains <shift, w>); applied by the shared SGD step in both engines."""
        return None

    def finish_update(self, update: ClientUpdate, ctx: LocalContext) -> None:
        """Complete the update after training, in both engines (extra uplink vectors, state
        to commit); ``ctx.model`` may be used as scratch."""

    def batches(self, ctx: LocalContext) -> Iterator[torch.Tensor]:
        """Index batches into the client's train split (FedQuad yields quadruplet batches)."""
        return minibatches(ctx.data.num_train, ctx.schedule, ctx.generator)

    def frozen_models(self, ctx: LocalContext) -> dict[str, FrozenParams]:
        """Named models the loss evaluates beside the one it trains (MOON: the round's global
        model and the client's previous local model), as (flat params, buffers).

        Both engines hand them to ``loss`` as ``ctx.frozen[name]``, gradient-free and in eval
        mode: the sequential engine as module copies, the vectorised one as functional views,
        where params that are the round's ``ctx.global_params`` (the same tensor for every
        client) are shared and all others are stacked per client. Clients with different
        names train in different vectorised chunks.
        """
        return {}

    def end_training(self, model: nn.Module, ctx: LocalContext, stats: dict[str, float]) -> None:
        """Hook after the last step, before the delta is taken, with ``model`` holding the
        client's local model (both engines); may add to ``stats``.

        Stats keys with a ``/`` become round metrics (``fedcore.metrics.client_stat_metrics``).
        """

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        """What this objective needs from the rest of the config (:mod:`fedcore.requirements`),
        checked at load by :func:`fedcore.configure.build_config`; none by default."""
        return []

    @classmethod
    def update_objective(cls, hp: BaseHParams) -> tuple[str, BaseHParams]:
        """The name and hyper-parameters of the objective whose update reaches the server: this
        one, unless it wraps another objective that trains the global model."""
        return cls.name, hp

    @classmethod
    def wrapping(cls, inner: str) -> str | None:
        """How a config names this client wrapping the objective ``inner`` (None: it wraps no
        objective); error messages offer it where a rule needs ``inner``'s update."""
        return None

    @property
    def projection_dim(self) -> int | None:
        """Width of a projection head the model gets in ``prepare_model`` (MOON); None: none."""
        return None

    def personal_params(
        self, state: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """A personalised client's (flat params, buffers) from its state; None if not personal."""
        return None

    def prepare_model(self, model: FedModel) -> None:
        """Adapt the freshly built model before theta is taken (MOON adds its projection head)."""

    def commit(
        self,
        state: dict[str, Any],
        update: ClientUpdate,
        sent: Mapping[str, torch.Tensor],
        accepted: bool,
    ) -> None:
        """Update client state once the server has judged the update (``sent``: the vectors as
        the server received them, after compression); called for every sampled client."""

    def evaluate_clients(self, rc: RoundContext) -> dict[str, np.ndarray]:
        """Per-client evaluation columns beyond the global model's (Ditto's personal models).

        A column named ``X_accuracy`` also gets fairness summary metrics under ``X/``.
        """
        return {}

    def local_update(self, ctx: LocalContext) -> ClientUpdate:
        from fedcore.clients.extras import AFTER_TRAINING, BEFORE_TRAINING

        model, data, sched = ctx.model, ctx.data, ctx.schedule
        start = ctx.start_params if ctx.start_params is not None else ctx.global_params
        load_flat_params(model, start)  # the delta below stays measured from global_params
        if ctx.global_buffers:
            model.load_state_dict(ctx.global_buffers, strict=False)
        stats = {k: fn(model, ctx) for k, fn in BEFORE_TRAINING.items() if k in ctx.needs}
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        momentum: list[torch.Tensor | None] = [None] * len(params)
        mu = self.proximal_mu
        anchors = ctx.global_tensors() if mu else None
        shift = self.gradient_shift(ctx)
        shifts = None if shift is None else [shift[s.start : s.stop].view(s.shape)
                                              for s in ctx.layout.slots]
        device = data.x_train.device
        loss_sum = torch.zeros((), device=device)
        seen, steps = 0, 0
        ctx.frozen = {
            name: model_view(frozen_copy(model, p, b))
            for name, (p, b) in self.frozen_models(ctx).items()
        }
        view = model_view(model)
        for idx in self.batches(ctx):
            idx = idx.to(device)
            x, y = data.x_train[idx], data.y_train[idx]
            for p in params:
                p.grad = None
            loss = self.loss(view, x, y, ctx)
            loss.backward()
            sgd_step(params, [p.grad for p in params], momentum, sched, mu, anchors, shifts)
            loss_sum += loss.detach() * len(idx)
            seen += len(idx)
            steps += 1
        ctx.frozen = {}
        stats["num_steps"] = float(steps)
        self.end_training(model, ctx, stats)
        for key, fn in AFTER_TRAINING.items():
            if key in ctx.needs:
                stats[key] = fn(model, ctx, steps, self)
        delta = flat_params(model) - ctx.global_params
        buffers = {
            k: v.detach().clone() for k, v in model.named_buffers() if v.dtype.is_floating_point
        }
        update = ClientUpdate(
            client_id=data.client_id,
            delta=delta,
            num_samples=data.num_train,
            num_steps=steps,
            train_loss=loss_sum / max(seen, 1),
            stats=stats,
            buffers=buffers,
        )
        self.finish_update(update, ctx)
        return update


def frozen_copy(
    model: nn.Module, params: torch.Tensor, buffers: dict[str, torch.Tensor]
) -> nn.Module:
    """An eval-mode, gradient-free copy of ``model`` holding ``params`` and ``buffers``."""
    twin = copy.deepcopy(model)
    load_flat_params(twin, params)
    if buffers:
        twin.load_state_dict(buffers, strict=False)
    return twin.requires_grad_(False).eval()


def model_view(model: nn.Module) -> ModelView:
    """``model`` as the sequential engine hands it to an objective: any module offers
    ``model(x)``; the objectives that call ``embedding``/``head`` run on FedModels."""
    return cast("ModelView", model)  # nn.Module types its submodules as Tensor | Module


def train_personal(ctx: LocalContext, plan: PersonalTraining) -> None:
    """Run ``plan`` on ``ctx.model`` (the sequential engine) and keep the personal model."""
    model, data = ctx.model, ctx.data
    load_flat_params(model, plan.start)
    if plan.buffers:
        model.load_state_dict(plan.buffers, strict=False)
    model.train()
    weights = [p for p in model.parameters() if p.requires_grad]
    momentum: list[torch.Tensor | None] = [None] * len(weights)
    anchors = ctx.global_tensors() if plan.mu else None
    for idx in plan.batches:
        idx = idx.to(data.x_train.device)
        for p in weights:
            p.grad = None
        plan.loss(model, data.x_train[idx], data.y_train[idx], ctx).backward()
        sgd_step(weights, [p.grad for p in weights], momentum, plan.schedule, plan.mu, anchors)
    buffers = {
        k: v.detach().clone() for k, v in model.named_buffers() if v.dtype.is_floating_point
    }
    plan.keep(ctx.state, flat_params(model).clone(), buffers)
