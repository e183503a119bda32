"""The first stage: a Byzantine client's update replaced by its attack, as the server sees it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fedcore.core.component.seeding import derive_seed
from fedcore.core.data.adversaries import attack_update
from fedcore.core.stages.base import Stage

if TYPE_CHECKING:
    from fedcore.core.records import ClientUpdate, StageContext


class Attack(Stage):
    """EVERY vector a Byzantine client sends (``client_algo.uplink``), in uplink order, from
    the attack's own stream (``clients.attack``, ``clients.attack_strength``)."""

    name = "attack"
    side = "client"

    def on_update(self, update: ClientUpdate, rc: StageContext) -> None:
        if update.client_id in rc.byzantine:
            attack(rc, update)


def attack(rc: StageContext, update: ClientUpdate) -> None:
    """Replace ``update``'s uplink vectors by the configured attack on them."""
    how, strength = rc.cfg.clients.attack, rc.cfg.clients.attack_strength
    seed = derive_seed(rc.cfg.seed, "attack", rc.round, update.client_id)
    generator = torch.Generator().manual_seed(seed)
    for name in rc.uplink:
        update.set_vector(name, attack_update(update.vector(name), how, strength, generator))
