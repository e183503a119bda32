"""A sampler's draw is checked every round: ``clients_per_round`` distinct integer ids in
``0..num_clients-1``, else one line naming the sampler. A plugin sampler returning duplicates,
-1 (it wrapped to the last client), floats (truncated) or every client ran to FINISHED silently;
an out-of-range id or an empty draw failed with a raw IndexError or torch error."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation
from fedcore.core.samplers.base import Population, Sampler
from tests.conftest import TINY


class Fixed(Sampler):
    """Returns ``DRAW`` whatever the round (a plugin sampler by import path)."""

    DRAW: object = [0, 1, 2]

    def sample(self, pop: Population) -> np.ndarray:
        return np.asarray(self.DRAW)


class Duplicates(Fixed):
    DRAW = [0, 0, 1]


class MinusOne(Fixed):
    DRAW = [-1, 0, 1]


class Floats(Fixed):
    DRAW = [0.5, 1.7, 2.2]


class Everyone(Fixed):
    DRAW = [0, 1, 2, 3, 4, 5]


class OutOfRange(Fixed):
    DRAW = [0, 1, 6]


class Empty(Fixed):
    DRAW: object = np.array([], dtype=np.int64)


@pytest.mark.parametrize(("cls", "problem"), [
    (Duplicates, "client id 0 more than once"),
    (MinusOne, "client id -1, outside 0..5"),
    (Floats, "a float64 array of shape (3,), not a list of integer ids"),
    (Everyone, "6 client id(s), not clients_per_round=3"),
    (OutOfRange, "client id 6, outside 0..5"),
    (Empty, "0 client id(s), not clients_per_round=3"),
])
def test_a_bad_draw_is_one_line_naming_the_sampler(cls, problem):
    path = f"tests.test_sampler_draws:{cls.__name__}"
    cfg = load_config(None, [*TINY, "rounds=1", "local.steps=1",
                             f"method.sampler={{sampler: '{path}'}}"])
    with pytest.raises(ValueError) as e:
        Simulation(cfg).run()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        f"sampler 'tests.test_sampler_draws:{cls.__name__}' "
        f"(tests.test_sampler_draws:{cls.__name__}) returned {problem} in round 1; a sampler "
        "returns 3 distinct integer ids in 0..5"), msg


def test_a_good_draw_runs():
    cfg = load_config(None, [*TINY, "rounds=1", "local.steps=1",
                             "method.sampler={sampler: 'tests.test_sampler_draws:Fixed'}"])
    assert len(Simulation(cfg).run().history) == 1
