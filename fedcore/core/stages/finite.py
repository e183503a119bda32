"""The last stage: non-finite updates are rejected (the run goes on without them)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import torch

from fedcore.core.numerics.finite import all_finite
from fedcore.core.records import Message
from fedcore.core.stages.base import Stage

if TYPE_CHECKING:
    from fedcore.core.records import ClientUpdate, StageContext

log = logging.getLogger("fedcore")


class NonFinite(Stage):
    """Client side: a client whose scalar for the server (``aggregator.needs``: ``loss_before``,
    ...) is NaN or Inf gets a NaN delta, so that it is rejected like a non-finite update (its
    error-feedback residual kept). Server side: an uplink with a non-finite vector is not
    accepted (counted in ``agg/rejected_clients`` and ``stages/non_finite/rejected``); its
    verdict adds to the other stages', never undoes one."""

    name = "non_finite"
    side = "server"

    def on_update(self, update: ClientUpdate, rc: StageContext) -> None:
        needs = rc.needs
        bad = sorted(k for k in needs if k in update.stats and not math.isfinite(update.stats[k]))
        if bad:
            log.warning("round %d: client %d sent non-finite %s", rc.round, update.client_id, bad)
            update.delta = torch.full_like(update.delta, math.nan)

    def on_receive(self, msg: Message, rc: StageContext) -> None:
        if not all(all_finite(v) for v in msg.sent.values()):
            msg.reject(self.name)
            log.warning("round %d: NaN or Inf in the update of client %d; excluded",
                        rc.round, msg.update.client_id)
