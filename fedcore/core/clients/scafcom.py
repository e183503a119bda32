"""SCAFCOM client (Huang, Li, Li, ICLR 2024), docs/methods/scafcom.md.

Local steps exactly as SCAFFOLD's (drift correction c - c_i). The client then forms its mean
local gradient g_bar, a momentum v_i+ = (1 - beta) v_i + beta g_bar, and sends ONE vector,
the compressed increment C(v_i+ - c_i) (no model delta). Once accepted it commits
v_i <- v_i+ and c_i <- c_i + C(v_i+ - c_i), the vector as the server received it.
"""

from __future__ import annotations

import torch
from pydantic import Field

from fedcore.core.clients.base import register
from fedcore.core.clients.scaffold import (
    CONTROL,
    ControlledClient,
    control_of,
    control_variate_needs,
)
from fedcore.core.component.registry import HParams as BaseHParams
from fedcore.core.component.requirements import Need
from fedcore.core.records.plan import Commit, Finished

MOMENTUM = "scafcom_v"  # v_i in the client store (absent: 0)


@register("scafcom")
class ScafcomClient(ControlledClient):
    class HParams(BaseHParams):
        beta: float = Field(0.2, gt=0.0, le=1.0)  # momentum weight; 1 = no momentum

    hp: HParams

    uplink = ("cv_increment",)

    @classmethod
    def requirements(cls, hp: BaseHParams) -> list[Need]:
        return control_variate_needs("scafcom", "scafcom", compressed=True)

    def finish(self, done: Finished) -> None:
        update, ctx = done.update, done.ctx
        c_i = control_of(ctx.state, ctx.global_params)
        update.stats["local_lr"] = ctx.schedule.lr
        if update.num_steps == 0:  # nothing learned: a zero increment, nothing committed
            update.set_vector("cv_increment", torch.zeros_like(c_i))
            return
        v = ctx.state.get(MOMENTUM)
        g_bar = self.mean_gradient(update, ctx)
        v_new = self.hp.beta * g_bar if v is None else (1 - self.hp.beta) * v.to(c_i) + (
            self.hp.beta * g_bar
        )
        update.set_vector("cv_increment", v_new - c_i)
        update.pending["v"] = v_new

    def commit(self, c: Commit) -> None:
        if not c.accepted or "v" not in c.update.pending:
            return
        state = c.state
        state[MOMENTUM] = c.update.pending["v"]
        increment = c.sent["cv_increment"]
        state[CONTROL] = control_of(state, increment) + increment
