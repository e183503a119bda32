"""Client-sample passes of the vectorised engine's local training, counted without training: a
plain lock-step ``vmap`` over a round's clients (every client runs the longest one's steps) vs
the engine's step-count buckets (a bucket leaves the batch after its last step; a ragged last
batch is padded to the chunk's widest batch), on a configuration's own partition and sampler.

Only the labels are drawn (``synthetic_cifar10``: no image is generated), then the partition,
each client's local train split and each round's sampled clients, exactly as a run draws them;
a client's steps are those of its plan (``fedcore.core.engines.buckets.planned_rows``).

    .venv/bin/python -m benchmarks.padding                       # CRAFT's recipe, 50 rounds
    .venv/bin/python -m benchmarks.padding --rounds 5 dataset.num_clients=100 \\
        clients_per_round=10 dataset.synthetic_samples=5000
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks._common import print_figures
from fedcore.core.component.seeding import numpy_rng
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, ExperimentConfig
from fedcore.core.data.federated import partition_indices
from fedcore.core.data.partition import split_local
from fedcore.core.engines.buckets import Passes, planned_rows, round_passes

CRAFT = Path(__file__).resolve().parents[1] / "configs" / "experiments" / "craft.yaml"
CRAFT_OVERRIDES = ["dataset.name=synthetic_cifar10"]


@dataclass(frozen=True)
class Count:
    """Passes over all counted rounds, and the per-round client-steps and batched steps."""

    lockstep: Passes
    bucketed: Passes
    client_steps: list[int]  # per round: the sampled clients' steps together
    longest: list[int]  # per round: the most steps of a sampled client (lock-step's steps)
    sizes: np.ndarray  # every client's local train size


def train_sizes(cfg: ExperimentConfig) -> np.ndarray:
    """Every client's local train size, as the run's data pipeline cuts them."""
    d = cfg.dataset
    if d.partition == "natural":
        raise ConfigError("dataset.partition='natural' is not counted here; allowed: dirichlet, "
                          "iid, shards")
    from fedcore.core.data.synthetic import SYNTHETIC, synthetic_labels

    if d.name in SYNTHETIC:
        labels = synthetic_labels(d.name, cfg.seed, d.synthetic_samples)[0].numpy()
    else:
        from fedcore.core.data.datasets import load_dataset

        labels = load_dataset(d.name, root=d.root, download=d.download, verify=d.verify,
                              seed=cfg.seed, global_test_fraction=d.global_test_fraction
                              ).y_train.numpy()
    parts = partition_indices(labels, d, cfg.seed)
    return np.array([len(split_local(idx, d.test_fraction,
                                     numpy_rng(cfg.seed, "local_split", k))[0])
                     for k, idx in enumerate(parts)])


def sampled_clients(cfg: ExperimentConfig, sizes: np.ndarray, round: int) -> np.ndarray:
    """Round ``round``'s clients from the configured sampler (one that reads no loss)."""
    from fedcore.core import samplers
    from fedcore.core.samplers import Population

    def no_loss(chosen: list[int]) -> np.ndarray:
        raise ConfigError("method.sampler reads the clients' losses, which need training; "
                          "allowed: a sampler that does not (uniform)")

    pop = Population(seed=cfg.seed, round=round, num_clients=len(sizes),
                     per_round=cfg.clients_per_round, sizes=sizes, local_loss=no_loss)
    return np.sort(np.asarray(samplers.build(cfg.method.sampler).sample(pop)))


def count(cfg: ExperimentConfig, rounds: int, chunk: int | None = None) -> Count:
    """Lock-step and bucketed passes of rounds 1..``rounds`` of ``cfg``."""
    sizes = train_sizes(cfg)
    local = cfg.local
    lock, bucketed = Passes(), Passes()
    client_steps, longest = [], []
    for r in range(1, rounds + 1):
        rows = [planned_rows(int(sizes[k]), local.batch_size, local.epochs, local.steps)
                for k in sampled_clients(cfg, sizes, r)]
        one_lock, one_bucketed = round_passes(rows, chunk)
        lock, bucketed = lock + one_lock, bucketed + one_bucketed
        client_steps.append(sum(len(x) for x in rows))
        longest.append(max(len(x) for x in rows))
    return Count(lock, bucketed, client_steps, longest, sizes)


def report(c: Count) -> dict[str, float]:
    """The figures the script prints."""
    return {
        "clients": len(c.sizes),
        "size_median": float(np.median(c.sizes)),
        "size_p99": float(np.percentile(c.sizes, 99)),
        "size_max": int(c.sizes.max()),
        "client_steps_per_round": float(np.mean(c.client_steps)),
        "lockstep_steps_per_round": float(np.mean(c.longest)),
        "useful": c.bucketed.useful,
        "lockstep_executed": c.lockstep.executed,
        "bucketed_executed": c.bucketed.executed,
        "lockstep_efficiency": c.lockstep.efficiency,
        "bucketed_efficiency": c.bucketed.efficiency,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides (key=value)")
    parser.add_argument("--config", type=Path, default=CRAFT,
                        help="experiment config (default: CRAFT's recipe, synthetic_cifar10)")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--chunk", type=int, default=None,
                        help="clients per chunk (default: the whole round in one chunk)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or (args.chunk is not None and args.chunk < 1):
        print("padding: --rounds and --chunk must be >= 1", file=sys.stderr)
        return 2
    extra = CRAFT_OVERRIDES if args.config == CRAFT else []
    try:
        cfg = load_config(args.config, [*extra, *args.overrides])
        figures = report(count(cfg, args.rounds, args.chunk))
    except ConfigError as e:
        print(f"padding: {e}", file=sys.stderr)
        return 2
    print_figures(figures, 26, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
