"""Round-loop overhead: a simulation's wall time over a bare PyTorch loop running the same SGD
steps on the same batches in one model (the floor). Ratios, measured in one process.

    .venv/bin/python -m benchmarks.round_overhead [--rounds 10]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks._common import best_of, print_table, shared_mnist_root
from fedcore.core.clients.base import minibatches
from fedcore.core.component.seeding import derive_seed
from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation


def bare_round(sim: Simulation, r: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Round ``r``'s clients, batches and SGD steps, all on one model (the floor's training)."""
    model.train()
    for cid in sim.sample_clients(r):
        data = sim.data.clients[int(cid)]
        gen = torch.Generator().manual_seed(derive_seed(sim.cfg.seed, "client", r, int(cid)))
        for idx in minibatches(data.num_train, sim.schedule(r), gen):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            loss.backward()
            opt.step()


def bare_loop(sim: Simulation, rounds: int) -> None:
    """The same clients, batches and SGD steps, on one model: no flattening, no aggregation."""
    opt = torch.optim.SGD(sim.model.parameters(), lr=sim.cfg.local.lr)
    for r in range(1, rounds + 1):
        bare_round(sim, r, sim.model, opt)


def measure(name: str, overrides: list[str], rounds: int) -> dict:
    cfg = load_config(None, [*overrides, f"rounds={rounds}"])
    data = Simulation(cfg).data
    floor = best_of(lambda: bare_loop(Simulation(cfg, data=data), rounds))
    no_eval = load_config(None, [*overrides, f"rounds={rounds}", f"eval_every={rounds}"])
    sim_no_eval = best_of(lambda: Simulation(no_eval, data=data).run())
    sim_eval = best_of(lambda: Simulation(cfg, data=data).run())
    return {"setting": name, "bare loop s": floor, "sim s (eval at end)": sim_no_eval,
            "ratio": sim_no_eval / floor, "sim s (eval every round)": sim_eval,
            "ratio with eval": sim_eval / floor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    rows = [measure("cnn digits 20 clients x5", ["model.name=cnn"], args.rounds)]
    root = shared_mnist_root()
    if root is not None:
        rows.append(measure("cnn mnist-8k 20 clients x5",
                            ["model.name=cnn", "dataset.name=mnist", f"dataset.root={root}",
                             "local.epochs=1", "local.batch_size=32"], args.rounds))
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
