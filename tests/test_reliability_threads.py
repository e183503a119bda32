"""Cells run in parallel threads (the sweep's default runner) give the numbers of the same cells
run alone: every section that seeds or draws from torch's process-wide generator holds
``GLOBAL_RNG_LOCK``. A dropout-free model's client training reseeded and restored that generator
without the lock while another thread's model initialisation drew from it: two cells in two
threads differed from the cells alone in 4 of 6 tries (fedprox) and 2 of 5 (fedavg)."""

from __future__ import annotations

import threading

import torch
from torch import nn

from fedcore.core.clients.fedavg import FedAvgClient
from fedcore.core.compose.configure import load_config
from fedcore.core.engines.sequential import draws_global_rng
from fedcore.core.models.cnn import CNN
from fedcore.core.models.mlp import MLP
from fedcore.core.round.simulation import Simulation

CELLS = {
    "fedprox": ["method=fedprox", "seed=0"],
    "fedavg": ["method=fedavg", "seed=1"],
}
BASE = ["model.name=mlp", "rounds=2", "dataset.num_clients=6", "clients_per_round=3",
        "local.steps=4", "engine.backend=sequential"]


def _run(name: str, out: dict, start: threading.Barrier | None = None) -> None:
    cfg = load_config(None, [*BASE, *CELLS[name]])
    if start is not None:
        start.wait()
    sim = Simulation(cfg)
    out[name] = (sim.params.clone(), sim.run().history)


def test_two_cells_in_two_threads_equal_the_cells_alone_10_of_10():
    alone: dict = {}
    for name in CELLS:
        _run(name, alone)
    for attempt in range(10):
        together: dict = {}
        start = threading.Barrier(len(CELLS))
        threads = [threading.Thread(target=_run, args=(name, together, start))
                   for name in CELLS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in CELLS:
            init, history = together[name]
            assert init.equal(alone[name][0]), f"try {attempt}: {name}'s initial model differs"
            assert _plain(history) == _plain(alone[name][1]), (
                f"try {attempt}: {name}'s metrics differ")


def _plain(history: list[dict]) -> list[dict]:
    """The history without its wall-clock timings (``.../seconds``)."""
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in history]


class _Noisy(nn.Module):
    """Plugin-like code: it may draw from the global RNG in ways no list of layers knows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


def test_training_that_may_draw_from_the_global_rng_is_known():
    """Such training seeds the global generator under the lock; other training leaves it alone."""
    fedavg = FedAvgClient()
    assert not draws_global_rng(MLP((1, 8, 8), 10), fedavg)
    assert draws_global_rng(CNN((3, 32, 32), 10), fedavg)  # dropout
    assert draws_global_rng(nn.Sequential(nn.Flatten(), nn.RReLU()), fedavg)
    assert draws_global_rng(nn.Sequential(nn.Flatten(), _Noisy()), fedavg)  # code not fedcore's

    class PluginObjective(FedAvgClient):
        pass

    assert draws_global_rng(MLP((1, 8, 8), 10), PluginObjective())
