"""SCAFFOLD, SCAFCOM, AFL and cos_align in the round loop: learning, invariants, bytes, resume."""

import pytest
import torch

from fedcore.core.clients.scaffold import CONTROL
from fedcore.core.compose.configure import load_config
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages import Chain, Stage

from .test_checkpoint import assert_resume_is_bit_identical

pytestmark = pytest.mark.slow

SMALL = ["model.name=mlp", "dataset.num_clients=8", "clients_per_round=4", "local.epochs=1"]
METHODS = ["scaffold", "scafcom_topk", "afl", "fedalign_fedoui"]


@pytest.mark.parametrize("method", METHODS)
def test_learns_on_digits(method):
    """Ten rounds on mildly skewed digits reach > 0.7 (chance 0.1; FedAvg 0.94 here)."""
    extra = ["method.compression.k_frac=0.1"] if method == "scafcom_topk" else []
    cfg = load_config(None, [*SMALL, "local.epochs=2", "dataset.alpha=1.0", "rounds=10",
                             "eval_every=10", f"method={method}", *extra])
    assert Simulation(cfg).run().summary["final/accuracy"] > 0.7


@pytest.mark.parametrize("method", ["scaffold", "scafcom_topk"])
def test_server_control_is_the_mean_of_all_client_controls(method):
    sim = Simulation(load_config(None, [*SMALL, "rounds=3", f"method={method}"]))
    n = sim.data.num_clients
    for r in range(1, 4):
        run_round(sim, r)
        mean = sum(sim.store[k].get(CONTROL, torch.zeros(sim.layout.dim)) for k in range(n)) / n
        torch.testing.assert_close(sim.aggregator.c, mean, atol=1e-6, rtol=1e-5)
    assert float(sim.aggregator.c.norm()) > 0


def test_bytes_both_directions():
    def last(method, *extra):
        sim = Simulation(load_config(None, [*SMALL, "rounds=1", f"method={method}", *extra]))
        return run_round(sim, 1), sim.layout.dim

    fedavg, d = last("fedavg")
    scaffold, _ = last("scaffold")
    rec, _ = last("scaffold", "method.client.uplink=reconstruct")
    scafcom, _ = last("scafcom_topk")
    side = 4  # n_k as an int32 (the MLP has no BatchNorm statistics)
    assert fedavg["comm/bytes_up"] == 4 * (4 * d + side) and fedavg["comm/bytes_down"] == 4 * 4 * d
    assert scaffold["comm/bytes_up"] == 4 * (8 * d + side)
    assert scaffold["comm/bytes_down"] == 4 * 8 * d
    assert rec["comm/bytes_up"] == 4 * (4 * d + side) and rec["comm/bytes_down"] == 4 * 8 * d
    assert scafcom["comm/bytes_up"] == 4 * (8 * max(1, int(0.01 * d)) + side)  # one Top-k vector
    assert scafcom["comm/bytes_down"] == 4 * 8 * d
    assert scaffold["comm/bytes_down_total"] == scaffold["comm/bytes_down"]


@pytest.mark.parametrize(("method", "extra"), [
    ("scaffold", []), ("scafcom_topk", []),
    ("afl", ["method.aggregator.eval_model=average"]), ("fedalign_fedoui", []),
])
def test_resume_is_bit_identical(tmp_path, method, extra):
    assert_resume_is_bit_identical(tmp_path, method, *extra)


def test_a_non_finite_extra_vector_rejects_the_client_and_skips_its_commit():
    """Acceptance covers every sent vector (not only the delta); a rejected client's c_i stays."""
    sim = Simulation(load_config(None, [*SMALL, "rounds=1", "method=scaffold"]))
    bad = int(sim.sample_clients(1)[0])

    class Spoil(Stage):  # a client-side stage: the bad client's control delta turns NaN
        name, side = "spoil", "client"

        def on_update(self, update, rc):
            if update.client_id == bad:
                update.extras["delta_c"] = torch.full_like(update.delta, float("nan"))

    sim.chain = Chain([*sim.chain.stages, Spoil()])
    metrics = run_round(sim, 1)
    assert metrics["agg/rejected_clients"] == 1.0
    assert CONTROL not in sim.store[bad]
    n = sim.data.num_clients
    mean = sum(sim.store[k].get(CONTROL, torch.zeros(sim.layout.dim)) for k in range(n)) / n
    torch.testing.assert_close(sim.aggregator.c, mean, atol=1e-6, rtol=1e-5)
