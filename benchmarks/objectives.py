"""Client objectives: time per round of each method over FedAvg's, measured in one process.

FedQuad's step forwards 4B images (B quadruplets) where FedAvg's forwards B, and one epoch is a
pass over the anchors, so about 4x FedAvg's work is expected; TripletFL about 3x.

    .venv/bin/python -m benchmarks.objectives [--rounds 3] [--models mlp cnn]
"""

from __future__ import annotations

import argparse
import time

from benchmarks._common import print_table
from fedcore.core.compose.configure import load_config
from fedcore.core.round.probes import run_round
from fedcore.core.round.simulation import Simulation

METHODS = ("fedavg", "fedquad", "quadrupletfl", "tripletfl", "supconfl", "moon", "ditto")


def seconds_per_round(methods: list[str], common: list[str], rounds: int, repeats: int = 3):
    """Minimum over ``repeats`` of each method's wall time per training round (no evaluation).

    Methods are interleaved within each repeat so that load drifts hit all of them alike.
    """
    data = Simulation(load_config(None, common)).data
    best = {m: float("inf") for m in methods}
    for _ in range(repeats):
        for method in methods:
            sim = Simulation(load_config(None, [f"method={method}", *common]), data=data)
            t0 = time.perf_counter()
            for r in range(1, rounds + 1):
                run_round(sim, r)
            best[method] = min(best[method], (time.perf_counter() - t0) / rounds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=["mlp", "cnn"])
    parser.add_argument("--methods", nargs="*", default=list(METHODS))
    args = parser.parse_args()
    methods = ["fedavg", *[m for m in args.methods if m != "fedavg"]]
    rows = []
    for model in args.models:
        common = [f"model.name={model}", "dataset.alpha=0.5", "local.epochs=1"]
        secs = seconds_per_round(methods, common, args.rounds)
        for method in methods:
            rows.append(
                {
                    "model": model,
                    "method": method,
                    "s/round": secs[method],
                    "ratio to fedavg": secs[method] / secs["fedavg"],
                }
            )
    print("digits, 20 clients, 5 per round, 1 local epoch, B=16 (FedQuad: 16 quadruplets)")
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
