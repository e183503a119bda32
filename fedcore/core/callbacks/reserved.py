"""Built-in metric names are reserved: a callback whose code is not fedcore's may not return
one (it replaced fedcore's own value in the history and in MLflow without a note), however it
came into the run: passed from Python, named in the config's ``callbacks`` (a registered name,
an entry point or ``module:Class``), or contributed by a plugin rule, objective or compressor.
The metric catalogue (``fedcore.core.metrics.catalogue``) says which names are built in; a
built-in callback replaced through ``Simulation(..., builtins=...)`` fills a built-in slot and
may return them."""

from __future__ import annotations

from collections.abc import Mapping

from fedcore.core.callbacks.base import Callback


def held(cb: Callback, builtin: Mapping[str, Callback | None]) -> bool:
    """Whether ``cb`` is held to the reserved names: its class is defined outside fedcore and
    it fills no built-in slot of ``builtin``."""
    from fedcore.core.component.loading import in_tree

    return not in_tree(type(cb)) and not any(cb is b for b in builtin.values())


def reserved(cb: Callback, metrics: Mapping[str, float],
             builtin: Mapping[str, Callback | None]) -> None:
    """A ``ValueError`` naming the first built-in metric (the metric catalogue's) among the
    metrics ``cb`` returned, when ``cb`` is ``held`` to the reserved names."""
    from fedcore.core.metrics.catalogue import lookup

    if held(cb, builtin) and (taken := [k for k in metrics if lookup(k) is not None]):
        raise ValueError(f"{type(cb).__name__}.on_round_end returned metric {taken[0]!r}, a "
                         f"built-in metric's name (reserved); give it its own, e.g. "
                         f"'mine/{taken[0].rsplit('/', 1)[-1]}'")
