"""Many tiny clients on the CPU: vectorised vs sequential engine, in one process.

CRAFT's protocol on ``digits`` (CRAFT's method, 100 clients, 10 per round, Dirichlet 0.1,
batch 20, one epoch: most clients take one or two local steps), where a Python loop's per-step
overhead dominates. Only the engines' ``train_round`` is timed, on each of ``--rounds`` rounds'
sampled clients (the run's own draw), the engines alternating after a warm-up, best of
``--repeats`` per round; the figure is their ratio in this process (sequential seconds /
vectorised seconds: above 1, the vectorised engine is faster).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.tiny_clients --models mlp,cnn
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

import torch

from benchmarks._common import print_table
from fedcore.core.compose.configure import load_config
from fedcore.core.engines import sequential
from fedcore.core.engines.select import Engine
from fedcore.core.engines.vectorised import VectorisedEngine
from fedcore.core.round.simulation import Simulation

PROTOCOL = ["method=craft", "dataset.name=digits", "dataset.partition=dirichlet",
            "dataset.alpha=0.1", "dataset.num_clients=100", "clients_per_round=10",
            "local.batch_size=20", "local.epochs=1", "local.steps=null", "local.momentum=0.0",
            "engine=sequential", "device=cpu"]


def measure(model: str, rounds: int, repeats: int, extra: list[str]) -> dict[str, object]:
    """Seconds per round of each engine on ``model`` (sum over rounds of the best call)."""
    sim = Simulation(load_config(None, [*PROTOCOL, f"model.name={model}", *extra]))
    engines: dict[str, Engine] = {
        "seq": sequential,
        "vec": VectorisedEngine(sim.model, sim.layout, sim.data.in_shape, sim.device),
    }
    total = dict.fromkeys(engines, 0.0)
    steps = 0
    for r in range(1, rounds + 1):
        sampled = list(map(int, sim.sample_clients(r)))
        rc = sim.round_context(r)
        sim.chain.begin_round(rc, sampled)
        best = dict.fromkeys(engines, float("inf"))
        for engine in engines.values():  # warm-up (vmap tracing)
            engine.train_round(rc, sampled)
        for _ in range(repeats):
            for name, engine in engines.items():
                t0 = time.perf_counter()
                updates = engine.train_round(rc, sampled)
                best[name] = min(best[name], time.perf_counter() - t0)
        steps += sum(u.num_steps for u in updates.values())
        for name in engines:
            total[name] += best[name]
    vec = engines["vec"]
    assert isinstance(vec, VectorisedEngine)
    return {"model": model, "rounds": rounds, "client-steps/round": steps / rounds,
            "seq s/round": total["seq"] / rounds, "vec s/round": total["vec"] / rounds,
            "ratio": total["seq"] / total["vec"],
            "efficiency (last round)": vec.passes.efficiency}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated model names")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="more config overrides (key=value)")
    args = parser.parse_args(argv)
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)", file=sys.stderr)
    rows = [measure(m, args.rounds, args.repeats, args.overrides)
            for m in args.models.split(",")]
    print_table(rows, list(rows[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
