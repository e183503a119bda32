"""The stage interface: an ordered chain of cross-cutting work around each client's update
(docs/explanation/round-protocol.md).

A stage sees a round through a few small hooks, every one optional: ``begin_round`` (metrics
at the round's start), ``start_point`` (where a client's local training starts),
``on_update`` (client side, on the trained update before it is sent), ``on_send`` (the uplink:
what goes on the wire and its bytes), ``on_receive`` (server side, on each message that arrived),
``receive_round`` (server side, once over all the round's messages, returning metrics) and
``end_round`` (once the rule's step is applied: the server's ``Closing``, which a stage may
change, e.g. an extra server step, and metrics). The round driver calls each hook on every
stage in chain order; stages named in ``method.stages`` come from ``REGISTRY``.

Each stage declares its ``side``: ``client`` (on the trained update before it is sent),
``wire`` (what travels: compression, transport) or ``server`` (on receipt). The chain's order
follows from the sides, client before wire before server; within a side the order given to
``Chain`` is kept (the composition root gives: the built-in attack, the config's stages in
``method.stages`` order, the built-in uplink, the built-in non-finite filter).

Server-side verdicts compose: a message is accepted only if no stage rejected it, a stage
cannot undo another's rejection, and each message records which stages rejected it
(``Message.rejected_by``; the round's ``stages/<stage>/rejected`` metric counts them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams, Registry
from fedcore.core.component.registry import HParams as AnyHParams
from fedcore.core.config.errors import ConfigError
from fedcore.core.records import Closing, Message, StageContext

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from fedcore.core.records import ClientUpdate

REGISTRY: Registry[Stage] = Registry(
    "stage", "stage", "fedcore.core.stages", "fedcore.core.stages.base:Stage"
)
register = REGISTRY.register
SIDES = ("client", "wire", "server")  # the chain's order


def stage_name(stage: Stage) -> str:
    """The stage's registered name (its class name when it has none)."""
    return str(getattr(stage, "name", type(stage).__name__))


def side_rank(stage: type[Stage] | Stage, where: str) -> int:
    """The place of the stage's declared ``side`` in ``SIDES``; a one-line ConfigError
    naming ``<where>.side`` when it declares none or another."""
    side = getattr(stage, "side", None)
    if side not in SIDES:
        got = "not declared" if side is None else f"got {side!r}"
        raise ConfigError(f"{where}.side: {got}; allowed: {', '.join(SIDES)}")
    return SIDES.index(side)


def rejections(msgs: list[Message]) -> dict[str, list[int]]:
    """The clients each stage rejected (stages that rejected none are left out)."""
    out: dict[str, list[int]] = {}
    for msg in msgs:
        for name in msg.rejected_by:
            out.setdefault(name, []).append(msg.update.client_id)
    return out


def uplink_vectors(
    update: ClientUpdate, names: tuple[str, ...] | list[str]
) -> dict[str, torch.Tensor]:
    """The named vectors a client sends, in uplink order (``delta`` or one of its extras)."""
    return {n: update.vector(n) for n in names}


class Stage(Component):
    """One link of the chain; every hook does nothing unless a subclass says otherwise."""

    name: ClassVar[str]
    side: ClassVar[str]  # one of SIDES: where in the chain the stage runs
    HParams: ClassVar[type[HParams]] = HParams
    hp: AnyHParams
    def begin_round(self, rc: StageContext, sampled: list[int]) -> dict[str, float]:
        """Metrics measured at the round's start, before any client trains."""
        return {}

    def start_point(
        self, rc: StageContext, client_id: int, planned_steps: Callable[[], int]
    ) -> torch.Tensor | None:
        """Where the client's local training starts (None: this stage does not move it);
        ``planned_steps()`` computes the number of local steps the client will take."""
        return None

    def on_update(self, update: ClientUpdate, rc: StageContext) -> None:
        """Client side: change the trained update (its uplink vectors) in place."""

    def on_send(self, msg: Message, rc: StageContext) -> None:
        """Uplink: replace ``msg.sent`` by what goes on the wire and add its bytes."""

    def on_receive(self, msg: Message, rc: StageContext) -> None:
        """Server side: inspect what arrived; may set ``msg.accepted`` False (a rejection)."""

    def receive_round(self, msgs: list[Message], rc: StageContext) -> dict[str, float]:
        """Server side, once per round, after this stage's ``on_receive`` of each message: all
        the round's messages (``msg.accepted`` False: an earlier stage rejected it); may reject
        any of them (``msg.reject(self.name)``) and returns metrics."""
        return {}

    def end_round(
        self, rc: StageContext, sampled: list[int], closing: Closing
    ) -> dict[str, float]:
        """Close the round once the rule's step is applied: may change ``closing`` (move
        ``closing.params``, replace ``closing.buffers``); returns metrics."""
        return {}


# The overrides of a tiny run that emits these metrics (fedcore.core.metrics.catalogue).
EMITTED_WHEN = ["method.stages=[{stage: median_norm, factor: 0.5}]"]

# What this module records: scope -> {metric: meaning} (read by fedcore.core.metrics.catalogue).
EMITTED_METRICS = {
    "round": {
        "stages/<stage>/rejected": (
            "sampled clients whose update that stage rejected this round (only in rounds where it "
            "rejected one; the round's per-client table marks them in rejected_by/<stage>)"
        ),
    },
}


class Chain:
    """Stages ordered by side (client, wire, server; the given order within a side); each
    driver phase calls one hook on every stage."""

    def __init__(self, stages: list[Stage]) -> None:
        self.stages = sorted(stages, key=lambda s: side_rank(s, f"stage {stage_name(s)}"))

    def begin_round(self, rc: StageContext, sampled: list[int]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for s in self.stages:
            metrics.update(s.begin_round(rc, sampled))
        return metrics

    def start_point(
        self, rc: StageContext, client_id: int, planned_steps: Callable[[], int]
    ) -> torch.Tensor | None:
        """The first start point a stage gives (None: the global model)."""
        for s in self.stages:
            point = s.start_point(rc, client_id, planned_steps)
            if point is not None:
                return point
        return None

    def client_side(self, ups: list[ClientUpdate], rc: StageContext) -> None:
        for up in ups:
            for s in self.stages:
                s.on_update(up, rc)

    def send(self, ups: list[ClientUpdate], rc: StageContext) -> list[Message]:
        msgs = [Message(up, uplink_vectors(up, rc.uplink)) for up in ups]
        for msg in msgs:
            for s in self.stages:
                s.on_send(msg, rc)
        return msgs

    def receive(self, msgs: list[Message], rc: StageContext) -> dict[str, float]:
        """Each stage in order judges every message, then the whole round; the metrics the
        stages return, and ``stages/<stage>/rejected`` for each stage that rejected a message
        this round."""
        metrics: dict[str, float] = {}
        for s in self.stages:
            for msg in msgs:
                msg.judge = stage_name(s)
                s.on_receive(msg, rc)
            metrics.update(s.receive_round(msgs, rc))
        for msg in msgs:
            msg.judge = "server"
        for name, ids in rejections(msgs).items():
            metrics[f"stages/{name}/rejected"] = float(len(ids))
        return metrics

    def end_round(
        self, rc: StageContext, sampled: list[int], closing: Closing
    ) -> dict[str, float]:
        """Every stage closes the round in chain order, each seeing ``closing`` as the earlier
        ones left it; their metrics merge."""
        metrics: dict[str, float] = {}
        for s in self.stages:
            metrics.update(s.end_round(rc, sampled, closing))
        return metrics

    def state_dict(self) -> list[dict[str, Any]]:
        return [s.state_dict() for s in self.stages]

    def load_state_dict(self, states: list[dict[str, Any]]) -> None:
        for s, state in zip(self.stages, states, strict=True):
            s.load_state_dict(state)
