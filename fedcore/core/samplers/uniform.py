"""Uniform sampling: m of N clients without replacement from the round's own stream."""

from __future__ import annotations

import numpy as np

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.samplers.base import Population, Sampler, register


@register("uniform")
class Uniform(Sampler):
    def sample(self, pop: Population) -> np.ndarray:
        rng = numpy_rng(pop.seed, "sample", pop.round)
        return np.sort(rng.choice(pop.num_clients, pop.per_round, replace=False))
