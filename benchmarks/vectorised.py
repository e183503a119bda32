"""Client-steps per second of local training, sequential vs vectorised engine (ratio), for the
CNN on digits and on the real MNIST t10k digits, at 5, 20 and 50 clients per round, and the
main job's MLP with epoch-based training (uneven step counts), and MOON and Ditto (their
frozen and personal models) on both models. Only the engines' ``train_round`` is timed (best
of ``--repeats``, alternating, after a warm-up; every call starts from the same client state,
primed by one sequential round: MOON's previous models, Ditto's personal ones); ``max |diff|``
is the largest difference between the two engines' deltas (float32 level). Runs on CUDA when
present (``--device``).

    .venv/bin/python -m benchmarks.vectorised [--steps 5] [--clients 5,20,50] [--device auto]
    .venv/bin/python -m benchmarks.vectorised --only moon,ditto --clients 20
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import torch

from benchmarks._common import print_table, shared_mnist_root
from fedcore.core.compose.configure import load_config
from fedcore.core.engines import sequential
from fedcore.core.engines.vectorised import VectorisedEngine
from fedcore.core.round.simulation import Simulation

NUM_CLIENTS = 50


def timed(sim: Simulation, engines: dict, sampled: list[int], repeats: int):
    """Best seconds of each engine's ``train_round`` on round 1's clients, and its updates.

    One warm-up call each (vmap tracing, cuDNN autotuning), then the engines alternate, so a
    burst of load from other processes hits both alike.
    """
    best = dict.fromkeys(engines, float("inf"))
    rc = sim.round_context(1)
    sequential.train_round(rc, sampled)  # client state: MOON's previous, Ditto's personal models
    primed = copy.deepcopy(sim.store.state_dict())

    def train(engine):
        sim.store.load_state_dict(copy.deepcopy(primed))  # every call starts from one state
        return engine.train_round(rc, sampled)

    updates = {name: train(engine) for name, engine in engines.items()}
    for _ in range(repeats):
        for name, engine in engines.items():
            sim.store.load_state_dict(copy.deepcopy(primed))
            if sim.device.type == "cuda":
                torch.cuda.synchronize(sim.device)
            t0 = time.perf_counter()
            updates[name] = engine.train_round(rc, sampled)
            if sim.device.type == "cuda":
                torch.cuda.synchronize(sim.device)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best, updates


def measure(name: str, overrides: list[str], clients: int, args) -> dict:
    cfg = load_config(None, [
        f"dataset.num_clients={NUM_CLIENTS}", f"clients_per_round={clients}",
        "dataset.alpha=0.5", f"local.steps={args.steps}", "local.batch_size=32",
        "local.momentum=0.9", f"device={args.device}", "engine=sequential", *overrides,
    ])
    sim = Simulation(cfg)
    sampled = list(map(int, sim.sample_clients(1)))
    sim.chain.begin_round(sim.round_context(1), sampled)
    best, updates = timed(
        sim,
        {"seq": sequential, "vec": VectorisedEngine(sim.model, sim.layout, sim.data.in_shape,
                                                    sim.device)},
        sampled,
        max(args.repeats, 1),
    )
    (t_seq, seq), (t_vec, vec) = (best["seq"], updates["seq"]), (best["vec"], updates["vec"])
    steps = sum(u.num_steps for u in seq.values())
    diff = max(float((vec[c].delta - seq[c].delta).abs().max()) for c in sampled)
    return {"setting": name, "device": str(sim.device), "clients": clients,
            "client-steps": steps, "seq steps/s": steps / t_seq, "vec steps/s": steps / t_vec,
            "ratio": t_seq / t_vec, "max |diff|": diff}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5, help="local steps per client")
    parser.add_argument("--clients", default="5,20,50", help="clients per round, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--only", default="",
                        help="comma-separated words; run the settings whose name has one")
    args = parser.parse_args()
    # the main job's local training: 5 epochs at alpha 0.1, so step counts differ per client
    main_job = ["model.name=mlp", "local.steps=null", "local.epochs=5", "local.batch_size=16",
                "dataset.alpha=0.1"]
    settings = [
        ("cnn digits", ["model.name=cnn"]),
        ("mlp digits 5 epochs a0.1", main_job),
    ]
    root = shared_mnist_root()
    if root is None:
        print("MNIST t10k not found in shared/data/mnist-t10k: digits only", file=sys.stderr)
    else:
        settings.append(("cnn mnist-8k", ["model.name=cnn", "dataset.name=mnist",
                                          f"dataset.root={root}"]))
    for method in ("moon", "ditto"):
        settings += [(f"{method} cnn digits", ["model.name=cnn", f"method={method}"]),
                     (f"{method} mlp digits 5 epochs a0.1", [*main_job, f"method={method}"])]
    if args.only:
        words = args.only.split(",")
        settings = [s for s in settings if any(w in s[0] for w in words)]
    rows = []
    for name, over in settings:
        for m in args.clients.split(","):
            rows.append(measure(name, over, int(m), args))
            print(rows[-1], file=sys.stderr, flush=True)  # progress
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
