"""Power-of-choice client selection (Cho, Wang, Joshi 2020, "Client selection in federated
learning: convergence analysis and power-of-choice selection strategies";
docs/methods/power_of_choice.md).

Each round: a candidate set of ``d`` clients drawn without replacement with probability
proportional to their training-set size, then the ``m`` candidates on which the current global
model has the highest local loss. The candidates are already drawn in proportion to the data
sizes, so the server averages the selected clients with equal weights, as in the paper (weighting
them by size again would count it twice)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from fedcore.core.component.registry import HParams
from fedcore.core.component.registry import HParams as AnyHParams
from fedcore.core.component.seeding import numpy_rng
from fedcore.core.samplers.base import Population, Sampler, register


class PowerOfChoiceHParams(HParams):
    d: int | None = Field(
        None, ge=1, description="candidate set size, clients_per_round <= d <= num_clients "
        "(unset: min(2 clients_per_round, num_clients))"
    )


@register("power_of_choice")
class PowerOfChoice(Sampler):
    HParams: ClassVar[type[AnyHParams]] = PowerOfChoiceHParams
    hp: PowerOfChoiceHParams

    def candidates(self, num_clients: int, per_round: int) -> int:
        return self.hp.d if self.hp.d is not None else min(2 * per_round, num_clients)

    def check(self, num_clients: int, per_round: int) -> str | None:
        d = self.candidates(num_clients, per_round)
        if not per_round <= d <= num_clients:
            return (f"method.sampler.d: the candidate set must hold clients_per_round.."
                    f"dataset.num_clients clients; allowed: {per_round}..{num_clients} (got {d})")
        return None

    def sample(self, pop: Population) -> np.ndarray:
        # at most the population: under ``system`` availability it may be fewer than d clients
        d = min(self.candidates(pop.num_clients, pop.per_round), pop.num_clients)
        rng = numpy_rng(pop.seed, "sample", "power_of_choice", pop.round)
        p = pop.sizes / pop.sizes.sum()
        cand = rng.choice(pop.num_clients, d, replace=False, p=p)
        loss = np.nan_to_num(pop.local_loss([int(k) for k in cand]), nan=-np.inf)
        top = np.argsort(-loss, kind="stable")[: pop.per_round]
        return np.sort(cand[top])

    def rule_sizes(self, sizes: list[int]) -> list[int]:
        """Equal weights 1/m: the paper's update averages the selected clients uniformly."""
        return [1] * len(sizes)
