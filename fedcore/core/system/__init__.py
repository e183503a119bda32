"""Federations as they are: clients that are not always there, train at their own speed and
report late, on a simulated clock (``system`` config block, docs/how-to/stragglers.md).

The round driver owns one `Synchronous` (or, for an asynchronous rule, a `Buffered`) object
and asks it, in order, which clients may be drawn (``pool``), which of the drawn ones train and
how far (``plan``), which updates reach the server (``arrive``) and the round's metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedcore.core.system.buffered import Buffered
from fedcore.core.system.profile import Profile, profile
from fedcore.core.system.synchronous import Synchronous

if TYPE_CHECKING:
    from fedcore.core.aggregators.base import Aggregator
    from fedcore.core.config import ExperimentConfig
    from fedcore.core.data.federated import FederatedData


def build(cfg: ExperimentConfig, data: FederatedData, aggregator: Aggregator) -> Synchronous:
    """The run's system: buffered for a rule that declares a buffer (``Aggregator.buffer``),
    else synchronous, inactive while ``cfg.system`` holds its defaults."""
    buffer = aggregator.buffer()
    if buffer is not None:
        return Buffered(profile(cfg, data), *buffer, device=data.x_test.device)
    return Synchronous(profile(cfg, data) if cfg.system.active else None)


__all__ = ["Buffered", "Profile", "Synchronous", "build", "profile"]
