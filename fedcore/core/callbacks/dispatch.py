"""The run's callbacks in order, and how the loop calls them and merges what they return.

Order: the built-in evaluation and summary, the components' own callbacks (``callbacks()`` of
every component: the client objective, the rule, the compressor, the sampler, the stages, the
configured callbacks; then the privacy account's) and the config's (``callbacks``), the user's
callbacks, then the divergence guard, the stop request and the checkpoint (last, so that it
holds the round's every metric).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict
from fedcore.core.callbacks.checkpointing import Checkpointing
from fedcore.core.callbacks.divergence import DivergenceGuard
from fedcore.core.callbacks.evaluation import Evaluation
from fedcore.core.callbacks.reserved import reserved
from fedcore.core.callbacks.signals import SignalStop
from fedcore.core.callbacks.summary import Summary

if TYPE_CHECKING:
    from fedcore.core.component.base import Component
    from fedcore.core.records.client_table import ClientTable
    from fedcore.core.records.run import Result

# the built-ins that may be replaced or turned off (Simulation(..., builtins={name: cb | None}))
BUILTINS = ("evaluation", "summary", "divergence", "checkpoint")


def builtins(
    target_accuracy: float | None, replace: Mapping[str, Callback | None] | None = None,
    last_k: int = 5,
) -> dict[str, Callback]:
    """The built-in callbacks by name, with ``replace``'s replacements (None: turned off)."""
    out: dict[str, Callback] = {
        "evaluation": Evaluation(), "summary": Summary(target_accuracy, last_k),
        "divergence": DivergenceGuard(), "checkpoint": Checkpointing(),
    }
    for name, cb in (replace or {}).items():
        if name not in out:
            raise ValueError(f"builtins: unknown built-in callback {name!r}; allowed: "
                             f"{', '.join(BUILTINS)}")
        if cb is None:
            del out[name]
        else:
            out[name] = checked(cb)
    return out


def contributed(components: Iterable[Component]) -> list[Callback]:
    """The callbacks the components contribute (their ``callbacks()``), in order."""
    return [checked(cb) for component in components for cb in component.callbacks()]


def chain(
    builtin: Mapping[str, Callback], components: list[Callback], user: list[Callback],
    signal: SignalStop,
) -> list[Callback]:
    """Every callback of a run, in the order they are called."""
    def pick(*names: str) -> list[Callback]:
        return [builtin[n] for n in names if n in builtin]

    mine = [checked(cb) for cb in user]
    return [*pick("evaluation", "summary"), *components, *mine,
            *pick("divergence"), signal, *pick("checkpoint")]


def checked(cb: object) -> Callback:
    """``cb`` if it is a ``Callback`` (TypeError otherwise)."""
    if not isinstance(cb, Callback):
        raise TypeError(
            f"callback {type(cb).__name__} is not a fedcore.core.callbacks.Callback subclass"
        )
    return cb


def end_round(
    callbacks: list[Callback], record: RoundRecord, entry: dict[str, float],
    tables: list[ClientTable], builtin: Mapping[str, Callback | None],
) -> None:
    """Call ``on_round_end`` of each callback in order, merging each verdict into ``record``,
    into the round's history ``entry`` and (a per-client table) into ``tables``; a callback of
    code outside fedcore that fills none of the ``builtin`` slots may not return a built-in
    metric name (``fedcore.core.callbacks.reserved``)."""
    for cb in callbacks:
        verdict = cb.on_round_end(record)
        if verdict is None:
            continue
        if not isinstance(verdict, RoundVerdict):
            raise TypeError(f"{type(cb).__name__}.on_round_end returned "
                            f"{type(verdict).__name__}, not a RoundVerdict or None")
        if verdict.clients is not None:
            if record.clients is None:
                tables.append(verdict.clients)
            else:
                tables[-1] = verdict.clients
            record.clients = verdict.clients
        if verdict.columns:
            if record.clients is None:
                raise ValueError(f"{type(cb).__name__} returned per-client columns in round "
                                 f"{record.round}, which has no per-client table")
            record.clients.extra.update(verdict.columns)
        reserved(cb, verdict.metrics, builtin)
        record.metrics.update(verdict.metrics)
        entry.update(verdict.metrics)
        if verdict.finish and record.converged is None and record.stop is None:
            record.converged = (verdict.finish if isinstance(verdict.finish, str)
                                else f"converged: {type(cb).__name__} after round {record.round}")
        record.checkpoint = record.checkpoint or verdict.checkpoint
        if verdict.stop and record.stop is None:
            record.stop = (verdict.stop if isinstance(verdict.stop, str)
                           else f"stopped by {type(cb).__name__} after round {record.round}")


def end_run(callbacks: list[Callback], result: Result) -> None:
    """Call ``on_run_end`` of each callback in order, adding what each returns to
    ``result.summary``."""
    for cb in callbacks:
        more = cb.on_run_end(result)
        if more:
            result.summary.update(more)
