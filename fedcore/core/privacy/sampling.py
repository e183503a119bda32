"""Poisson sampling for central DP: each training client joins a round independently with
probability q, from the round's own stream, so that rounds may hold any number of clients
(none included) and the accountant's subsampling amplification holds."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fedcore.core.component.seeding import numpy_rng
from fedcore.core.samplers.base import Population, Sampler


class PoissonSampler(Sampler):
    """Each of the N training clients independently with probability ``rate``."""

    name: ClassVar[str] = "poisson"
    fixed_size: ClassVar[bool] = False

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate

    def sample(self, pop: Population) -> np.ndarray:
        rng = numpy_rng(pop.seed, "sample", "poisson", pop.round)
        return np.flatnonzero(rng.random(pop.num_clients) < self.rate)
