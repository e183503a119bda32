"""The client sampler interface: which clients train in a round (``method.sampler``).

The round driver asks its sampler once per round; a sampler sees the population through a
``Population`` record (sizes, the seed, and a way to measure the current global model's
loss on chosen clients), never the simulation itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedcore.core.component.base import Component
from fedcore.core.component.registry import HParams, Registry
from fedcore.core.component.registry import HParams as AnyHParams

REGISTRY: Registry[Sampler] = Registry(
    "sampler", "sampler", "fedcore.core.samplers", "fedcore.core.samplers.base:Sampler"
)
register = REGISTRY.register
DEFAULT = "uniform"


@dataclass(frozen=True)
class Population:
    """What a sampler may read in one round: the training population, numbered 0..n-1.
    Clients held out of training (``dataset.holdout_clients``) are not in it, nor, under the
    ``system`` block, clients not available this round (then ``num_clients`` and ``per_round``
    change from round to round); the simulation maps the ids a sampler returns back to client
    ids, so no sampler can pick one."""

    seed: int
    round: int
    num_clients: int
    per_round: int  # m: clients_per_round, or fewer when fewer are available
    sizes: np.ndarray  # training samples of each client
    # the current global model's mean training loss on each of the given clients
    local_loss: Callable[[list[int]], np.ndarray]


class Sampler(Component):
    name: ClassVar[str]
    HParams: ClassVar[type[HParams]] = HParams
    hp: AnyHParams
    # whether every draw holds exactly clients_per_round clients (False: any number, Poisson)
    fixed_size: ClassVar[bool] = True


    def check(self, num_clients: int, per_round: int) -> str | None:
        """Why this sampler cannot serve ``per_round`` of ``num_clients`` clients, or None."""
        return None

    def sample(self, pop: Population) -> np.ndarray:
        """The round's client ids, sorted, without repeats."""
        raise NotImplementedError

    def rule_sizes(self, sizes: list[int]) -> list[int]:
        """The sample counts the server weights the selected clients by (the rule's
        ``UpdateBatch.num_samples`` and the BatchNorm statistics), given their own: unchanged
        unless the draw already followed the data sizes."""
        return sizes
