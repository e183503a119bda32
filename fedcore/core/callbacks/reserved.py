"""Built-in metric names are reserved: a callback the user passes may not return one (it
replaced fedcore's own value in the history and in MLflow without a note). The metric
catalogue (:mod:`fedcore.core.metrics.catalogue`) says which names are built in; a built-in callback
replaced through ``Simulation(..., builtins=...)`` is not a user callback and may return them."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping

from fedcore.core.callbacks.base import Callback

_USER: weakref.WeakValueDictionary[int, Callback] = weakref.WeakValueDictionary()


def user_callback(cb: Callback) -> Callback:
    """``cb``, marked as the user's when its class is defined outside fedcore: its verdicts may
    not reuse a built-in metric name (:func:`reserved`). One whose instances take no weak
    reference (``__slots__`` without ``__weakref__``) is not held to that."""
    from fedcore.core.config.component_loading import in_tree

    if not in_tree(type(cb)):
        with contextlib.suppress(TypeError):
            _USER[id(cb)] = cb
    return cb


def reserved(cb: Callback, metrics: Mapping[str, float]) -> None:
    """A ``ValueError`` naming the first built-in metric (the metric catalogue's) among the
    metrics user callback ``cb`` returned: a callback may not replace fedcore's values."""
    from fedcore.core.metrics.catalogue import lookup

    if _USER.get(id(cb)) is cb and (taken := [k for k in metrics if lookup(k) is not None]):
        raise ValueError(f"{type(cb).__name__}.on_round_end returned metric {taken[0]!r}, a "
                         f"built-in metric's name (reserved); give it its own, e.g. "
                         f"'mine/{taken[0].rsplit('/', 1)[-1]}'")
