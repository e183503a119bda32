"""A run's resumable state: what a checkpoint holds of a simulation (round protocol v2) and
how it is checked and restored (``Simulation.state_dict`` / ``load_state_dict``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from fedcore.core.config.limits import shown
from fedcore.core.records.client_table import ClientTable
from fedcore.core.round import checkpoint

if TYPE_CHECKING:
    import torch

    from fedcore.core.aggregators.base import Aggregator
    from fedcore.core.callbacks.configured import ConfiguredCallback
    from fedcore.core.clients.base import ClientAlgorithm
    from fedcore.core.component.base import Component
    from fedcore.core.compression.base import Compressor
    from fedcore.core.config import ExperimentConfig
    from fedcore.core.privacy.ledger import Ledger
    from fedcore.core.records.store import ClientStore
    from fedcore.core.samplers.base import Sampler
    from fedcore.core.stages.base import Chain
    from fedcore.core.system import Synchronous

# What a state holds (round protocol v2); a checkpoint lacking one cannot resume. ``stages``
# and ``callbacks`` are left out: checkpoints written before them load with empty states;
# ``privacy`` (the privacy account) is there when the run has a privacy mechanism;
# ``components`` (the client objective's, the compressor's and the sampler's) when one has any.
STATE_KEYS = (
    "config_hash", "round", "bytes_up_total", "bytes_down_total", "params", "buffers",
    "aggregator", "store", "history", "client_tables", "rng",
)


class Resumable(Protocol):
    """The parts of a run a state holds (the simulation has them)."""

    cfg: ExperimentConfig
    device: torch.device
    round: int
    bytes_up_total: int
    bytes_down_total: int
    params: torch.Tensor
    buffers: dict[str, torch.Tensor]
    aggregator: Aggregator
    store: ClientStore
    chain: Chain
    configured: list[ConfiguredCallback]
    client_algo: ClientAlgorithm
    compressor: Compressor
    sampler: Sampler
    privacy: Ledger | None
    history: list[dict[str, float]]
    client_tables: list[ClientTable]
    system: Synchronous


def state_of(run: Resumable) -> dict[str, Any]:
    """Everything a resumed run needs to finish with the same numbers (plain containers)."""
    return {
        "config_hash": run.cfg.config_hash(),
        "round": run.round,
        "bytes_up_total": run.bytes_up_total,
        "bytes_down_total": run.bytes_down_total,
        "params": run.params,
        "buffers": run.buffers,
        "aggregator": run.aggregator.state_dict(),
        "store": run.store.state_dict(),
        "history": run.history,
        "client_tables": [vars(t) for t in run.client_tables],
        "rng": checkpoint.rng_state(),
        "stages": run.chain.state_dict(),
        "callbacks": [cb.state_dict() for cb in run.configured],
        **_own_states(run),
        **({"privacy": run.privacy.state_dict()} if run.privacy is not None else {}),
        **({"system": system} if (system := run.system.state_dict()) else {}),
    }


def _own(run: Resumable) -> dict[str, Component]:
    """The components whose state no other key holds (the rule, the stages with the error
    feedback, and the configured callbacks have theirs)."""
    return {"client": run.client_algo, "compressor": run.compressor, "sampler": run.sampler}


def _own_states(run: Resumable) -> dict[str, Any]:
    """``{"components": {kind: state}}`` of ``_own``, left out while every state is empty (so
    that a checkpoint of components without state is as it was)."""
    states = {kind: c.state_dict() for kind, c in _own(run).items()}
    return {"components": states} if any(states.values()) else {}


def _states(state: dict[str, Any], key: str, count: int, what: str) -> list[dict[str, Any]]:
    """The list of ``count`` component states under ``key`` (empty ones when absent)."""
    states = state.get(key)
    if states is None:
        return [{} for _ in range(count)]
    if not isinstance(states, list) or len(states) != count or not all(
        isinstance(st, dict) for st in states
    ):
        raise checkpoint.unusable(state, f"its {what} states do not match this run's {what}s")
    return states


def restore(run: Resumable, state: dict[str, Any], rng: bool = True) -> None:
    """Restore ``state_of`` into ``run`` (and, with ``rng``, the global generators).

    A checkpoint of an older version (lacking keys, e.g. ``bytes_down_total`` before round
    protocol v2), of another config, or inconsistent with this run (``check_state``) raises a
    one-line ``CheckpointError`` naming its file, before any change.
    """
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise checkpoint.unusable(
            state, f"it lacks {', '.join(missing)} (written by an older fedcore version)"
        )
    if state["config_hash"] != run.cfg.config_hash():
        raise checkpoint.unusable(
            state, f"it is a checkpoint of config {shown(state['config_hash'])}, "
            f"not of this run's config {run.cfg.config_hash()}"
        )
    problem = checkpoint.check_state(
        state, run.cfg.rounds, run.cfg.eval_every, run.params, run.buffers
    )
    if problem:
        raise checkpoint.unusable(state, problem)
    if (run.privacy is not None) != ("privacy" in state):
        raise checkpoint.unusable(state, "its privacy account does not match this run's "
                                  "privacy.mechanism")
    stages = _states(state, "stages", len(run.chain.stages), "stage")
    callbacks = _states(state, "callbacks", len(run.configured), "callback")
    run.round = int(state["round"])
    run.bytes_up_total = int(state["bytes_up_total"])
    run.bytes_down_total = int(state["bytes_down_total"])
    run.params = state["params"].to(run.device)
    run.buffers = {k: v.to(run.device) for k, v in state["buffers"].items()}
    run.aggregator.load_state_dict(state["aggregator"])
    run.store.load_state_dict(state["store"])
    run.chain.load_state_dict(stages)
    for cb, cb_state in zip(run.configured, callbacks, strict=True):
        cb.load_state_dict(cb_state)
    own = state.get("components", {})
    for kind, component in _own(run).items():
        component.load_state_dict(own.get(kind, {}))
    if run.privacy is not None:
        run.privacy.load_state_dict(state["privacy"])
    run.system.load_state_dict(state.get("system", {}))
    run.history[:] = [dict(h) for h in state["history"]]
    run.client_tables[:] = [ClientTable(**t) for t in state["client_tables"]]
    if rng:
        checkpoint.set_rng_state(state["rng"])
