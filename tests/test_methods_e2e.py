"""Every shipped method config runs end to end on digits and learns; CRAFT removes conflicts."""

import pytest

from fedcore.core.compose.configure import load_config
from fedcore.core.config import method_names
from fedcore.core.round.simulation import Simulation

pytestmark = pytest.mark.slow  # end to end (see docs/how-to/tests.md)

# CRAFT's server_lr is an absolute per-layer step (docs/methods/craft.md) and ConFIG's length sums
# the m clients' projections: scaled here so that a 12-round run shows learning.
SCALE = {"craft": 1.0, "craft_model": 1.0, "config": 0.2, "ditto_craft": 1.0}
QUICK = ["rounds=12", "model.name=mlp", "dataset.alpha=1.0", "dataset.num_clients=10"]


@pytest.mark.parametrize("method", method_names())
def test_method_learns_on_digits(method):
    extra = [f"method.aggregator.server_lr={SCALE[method]}"] if method in SCALE else []
    result = Simulation(load_config(None, [f"method={method}", *QUICK, *extra])).run()
    assert result.summary["final/accuracy"] > 0.5, result.summary  # chance is 0.1
    assert all(h["agg/rejected_clients"] == 0 for h in result.history)


def test_craft_has_no_conflicts_where_fedavg_has_some():
    common = ["rounds=15", "model.name=mlp", "dataset.alpha=0.1", "clients_per_round=10"]
    craft = Simulation(load_config(None, ["method=craft", *common])).run()
    fedavg = Simulation(load_config(None, ["method=fedavg", *common])).run()
    assert all(h["agg/conflict_fraction"] == 0 for h in craft.history)
    assert all(h["craft/conflict_after"] == 0 for h in craft.history)
    assert max(h["agg/conflict_fraction"] for h in fedavg.history) > 0


OBJECTIVES = ["fedquad", "tripletfl", "quadrupletfl", "supconfl", "moon", "ditto"]


@pytest.mark.parametrize("method", OBJECTIVES)
def test_client_objective_learns_at_alpha_half(method):
    cfg = load_config(None, [f"method={method}", "rounds=10", "model.name=mlp",
                             "dataset.alpha=0.5", "dataset.num_clients=10"])
    sim = Simulation(cfg)
    assert min(len(c.y_train.unique()) for c in sim.data.clients) >= 3
    result = sim.run()
    assert result.summary["final/accuracy"] > 0.5, result.summary
    assert 0 < result.history[-1]["repr/intra_inter_ratio"] < 1
