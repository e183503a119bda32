"""Which execution engine a configuration gets, and why (the support rules of the vectorised one).

The choice is made once, by the composition root (``fedcore.core.compose.assembly`` calls
``build_engine``); config validation only checks, with ``check_engine``, that an
explicit ``engine.backend=vectorised`` is possible, so that it fails as a one-line
``ConfigError`` before any compute.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from fedcore.core.config import ConfigError, ExperimentConfig

if TYPE_CHECKING:
    import torch

    from fedcore.core.engines.round_context import RoundContext
    from fedcore.core.models import FedModel
    from fedcore.core.models.layout import ParamLayout
    from fedcore.core.records import ClientUpdate

log = logging.getLogger("fedcore")
BACKENDS = ("auto", "sequential", "vectorised")
# Why ``auto`` keeps CPU runs sequential: vectorised / sequential client-steps per second
# (benchmarks/vectorised.py, docs/how-to/gpu.md).
CPU_MEASURED = (
    "vectorised/sequential on a 2-core CPU, one torch thread, two runs on a quiet machine, "
    "2026-12-02: MLP 0.54-0.59x at 5 clients per round, 0.79-1.05x at 20, 1.16-1.33x at 50; "
    "CNN 0.59-0.86x at 5-50; benchmarks/vectorised.py"
)
RESNETS = ("resnet20", "resnet56", "resnet110")
# Where ``auto`` picks the vectorised engine on CPU: many tiny clients (benchmarks/tiny_clients.py,
# docs/benchmarks/vectorised.md), where the sequential engine's per-client overhead dominates.
TINY_STEPS = 2.0  # at most this many planned local steps per client, on average
TINY_CLIENTS = 10  # at least this many clients per round
TINY_MODELS = ("mlp", "resnet20")  # the models measured faster vectorised there
CPU_TINY_MEASURED = (
    "many tiny clients on digits (100 clients, 10 per round, batch 20, one epoch: one step per "
    "client), one torch thread, 2026-12-05: vectorised/sequential 1.31-1.50x for the MLP "
    "(1.26x at 2 steps, 1.12x at 4), 1.08-1.18x for ResNet-20 with GroupNorm, 0.72-0.81x for "
    "the CNN; benchmarks/tiny_clients.py"
)


def tiny_clients(cfg: ExperimentConfig, steps_per_client: float | None) -> bool:
    """Whether ``cfg`` is the CPU setting the vectorised engine measured faster in: at least
    ``TINY_CLIENTS`` clients per round taking at most ``TINY_STEPS`` local steps on
    average, on a model of ``TINY_MODELS``."""
    return (steps_per_client is not None and steps_per_client <= TINY_STEPS
            and cfg.clients_per_round >= TINY_CLIENTS and cfg.model.name in TINY_MODELS)


class Engine(Protocol):
    """Trains a round's sampled clients: the sequential module or a VectorisedEngine."""

    def train_round(
        self, rc: RoundContext, sampled: list[int], order: list[int] | None = None
    ) -> dict[int, ClientUpdate]: ...


def vectorised_clients() -> list[str]:
    """Client objectives whose ``loss`` the vectorised engine vmaps (``vectorisable``)."""
    from fedcore.core.clients.base import REGISTRY

    return sorted(name for name, cls in REGISTRY.classes().items() if cls.vectorisable)


def vectorised_blocker(cfg: ExperimentConfig) -> str | None:
    """Why ``cfg`` cannot train clients with the vectorised engine; None when it can."""
    from fedcore.core.clients.base import REGISTRY

    algo = cfg.method.client.get("algorithm")
    allowed = vectorised_clients()
    why = REGISTRY.build(cfg.method.client).not_vectorised_reason()
    if why is not None:
        return (
            f"method.client.algorithm={algo!r} is not vectorised ({why}); "
            f"allowed: {', '.join(allowed)}"
        )
    if cfg.model.name in RESNETS and cfg.model.norm == "batch":
        return (
            f"model.norm='batch' with model.name={cfg.model.name!r} has BatchNorm running "
            "statistics, which cannot be vmapped; allowed: model.norm=group"
        )
    return None


def unsupported(blocker: str) -> ConfigError:
    """The one-line error of an explicit ``engine.backend=vectorised`` that cannot be had."""
    return ConfigError(f"engine.backend: 'vectorised' unsupported here: {blocker}")


def check_engine(cfg: ExperimentConfig) -> None:
    """Config validation: raise the one-line ConfigError of an explicit ``vectorised`` that the
    method or model rules out; chooses nothing (the composition root does)."""
    if cfg.engine.backend == "vectorised":
        blocker = vectorised_blocker(cfg)
        if blocker is not None:
            raise unsupported(blocker)


def choose_engine(cfg: ExperimentConfig) -> tuple[str, str]:
    """(engine name, reason) for ``cfg.engine.backend``, on the configuration alone; raises
    ConfigError if impossible."""
    backend = cfg.engine.backend
    if backend == "sequential":
        return "sequential", "engine.backend=sequential"
    blocker = vectorised_blocker(cfg)
    if blocker is None:
        return "vectorised", f"engine.backend={backend}"
    if backend == "vectorised":
        raise unsupported(blocker)
    return "sequential", blocker


def build_engine(
    cfg: ExperimentConfig,
    model: FedModel,
    layout: ParamLayout,
    in_shape: tuple[int, ...],
    device: torch.device,
    steps_per_client: float | None = None,
) -> tuple[Engine, str, str]:
    """(engine, name, reason) for a simulation: the config's choice, checked on the real model.

    ``auto`` picks the vectorised engine on CUDA, and on CPU only for many tiny clients
    (``tiny_clients``, ``steps_per_client`` the mean planned local steps of a client):
    elsewhere on CPU it measured slower than the sequential engine (``CPU_MEASURED``,
    ``CPU_TINY_MEASURED``, recorded as the run's ``engine_reason``). An explicit
    ``vectorised`` whose model cannot be vmapped raises ConfigError before training.
    """
    from fedcore.core.engines import sequential

    name, reason = choose_engine(cfg)
    if name == "sequential":
        return sequential, name, reason
    if cfg.engine.backend == "auto" and device.type != "cuda":
        if not tiny_clients(cfg, steps_per_client):
            return sequential, "sequential", (
                f"engine.backend=auto on {device.type}: the vectorised engine measured slower "
                f"than the sequential one there, or at best 1.33x for the MLP at 50 clients per "
                f"round ({CPU_MEASURED}); faster only with at least {TINY_CLIENTS} clients per "
                f"round of at most {TINY_STEPS:g} local steps on {' or '.join(TINY_MODELS)} "
                f"({CPU_TINY_MEASURED}); engine.backend=vectorised forces it"
            )
        reason = (
            f"engine.backend=auto on {device.type}: {cfg.clients_per_round} clients per round "
            f"of {steps_per_client:.2g} local steps on average on {cfg.model.name}, where the "
            f"vectorised engine measured faster ({CPU_TINY_MEASURED})"
        )
    from fedcore.core.engines.vectorised import VectorisedEngine, model_blocker

    blocker = model_blocker(model)
    if blocker is None:
        engine = VectorisedEngine(model, layout, in_shape, device, cfg.engine.max_clients_per_chunk)
        return engine, name, reason
    if cfg.engine.backend == "vectorised":
        raise unsupported(blocker)
    return sequential, "sequential", blocker


def engine_metrics(engine: Engine) -> dict[str, float]:
    """The round metrics of the engine's last round (the vectorised engine's padding; the
    sequential engine pads nothing and records none)."""
    metrics = getattr(engine, "round_metrics", None)
    return dict(metrics()) if callable(metrics) else {}


def note_fallback(engine: Engine, name: str, reason: str) -> tuple[str, str]:
    """(name, reason) of what trained: a vectorised engine that fell back to sequential
    training (an objective it cannot express) makes them say so, once."""
    from fedcore.core.engines import sequential

    why = getattr(engine, "fallback", None)
    if not why or name == sequential.NAME:
        return name, reason
    reason = f"the vectorised engine fell back to sequential training: {why}"
    log.info("engine: %s (%s)", sequential.NAME, reason)
    return sequential.NAME, reason
