"""Which execution engine a configuration gets, and why (the support rules of the vectorised one).

Rules are checked on the configuration alone so that an explicit ``engine.backend=vectorised``
with an unsupported combination fails as a one-line ``ConfigError`` before any compute.
"""

from __future__ import annotations

from typing import Any

from fedcore.config import ConfigError

BACKENDS = ("auto", "sequential", "vectorised")
# Client objectives the vectorised engine expresses functionally (fedcore/engines/objectives.py).
VECTORISED_CLIENTS = ("fedavg", "fedprox", "fedquad", "quadrupletfl", "tripletfl")
RESNETS = ("resnet20", "resnet56", "resnet110")


def vectorised_blocker(cfg: Any) -> str | None:
    """Why ``cfg`` cannot train clients with the vectorised engine; None when it can."""
    algo = cfg.method.client.get("algorithm")
    if algo not in VECTORISED_CLIENTS:
        return (
            f"method.client.algorithm={algo!r} is not vectorised; "
            f"allowed: {', '.join(VECTORISED_CLIENTS)}"
        )
    if cfg.model.name in RESNETS and cfg.model.norm == "batch":
        return (
            f"model.norm='batch' with model.name={cfg.model.name!r} has BatchNorm running "
            "statistics, which cannot be vmapped; allowed: model.norm=group"
        )
    return None


def choose_engine(cfg: Any) -> tuple[str, str]:
    """(engine name, reason) for ``cfg.engine.backend``; raises ConfigError if impossible."""
    backend = cfg.engine.backend
    blocker = vectorised_blocker(cfg)
    if backend == "sequential":
        return "sequential", "engine.backend=sequential"
    if blocker is None:
        return "vectorised", f"engine.backend={backend}"
    if backend == "vectorised":
        raise ConfigError(f"engine.backend: 'vectorised' unsupported here: {blocker}")
    return "sequential", blocker


def validate_engine(cfg: Any) -> None:
    """Raise the one-line ConfigError of an impossible explicit engine choice."""
    choose_engine(cfg)


def build_engine(sim: Any) -> tuple[Any, str, str]:
    """(engine, name, reason) for a simulation: the config's choice, checked on the real model.

    ``auto`` picks the vectorised engine on CUDA only (on CPU it measured 0.6-1.2x the
    sequential speed). An explicit ``vectorised`` whose model cannot be vmapped raises
    ConfigError before training.
    """
    from fedcore.engines import sequential

    name, reason = choose_engine(sim.cfg)
    if name == "sequential":
        return sequential, name, reason
    if sim.cfg.engine.backend == "auto" and sim.device.type != "cuda":
        return sequential, "sequential", (
            f"engine.backend=auto on {sim.device.type}: the vectorised engine is not faster "
            "there for convolutions (benchmarks/vectorised.py); engine.backend=vectorised "
            "forces it"
        )
    from fedcore.engines.vectorised import VectorisedEngine, model_blocker

    blocker = model_blocker(sim.model)
    if blocker is None:
        return VectorisedEngine(sim), name, reason
    if sim.cfg.engine.backend == "vectorised":
        raise ConfigError(f"engine.backend: 'vectorised' unsupported here: {blocker}")
    return sequential, "sequential", blocker
