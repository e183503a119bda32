"""Aggregation time per rule versus m (clients per round) and d (model size), as a ratio to
FedAvg's time on the same update matrix, measured in one process.

    .venv/bin/python -m benchmarks.aggregation [--clients 10 50 100] [--models cnn resnet20]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks._common import best_of, print_table
from fedcore.core import aggregators
from fedcore.core.models import build_model
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records.aggregate import UpdateBatch

SHAPES = {"cnn": (1, 28, 28), "resnet20": (3, 32, 32), "mlp": (1, 28, 28)}


def make_batch(layout: ParamLayout, m: int, seed: int = 0) -> UpdateBatch:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(layout.dim, generator=g)
    deltas = 0.5 * base + torch.randn(m, layout.dim, generator=g)
    stats = {
        "loss_before": 1.0 + torch.rand(m, generator=g, dtype=torch.float64),
        "oui": 0.2 + 0.2 * torch.rand(m, generator=g, dtype=torch.float64),
        "num_steps": torch.randint(5, 20, (m,), generator=g).double(),
    }
    stats["accumulation_norm"] = stats["num_steps"].clone()
    stats["local_lr"] = torch.full((m,), 0.05, dtype=torch.float64)
    num_samples = torch.randint(20, 200, (m,), generator=g).double()
    extras = {  # SCAFFOLD's and SCAFCOM's second uplink vector
        name: 0.1 * torch.randn(m, layout.dim, generator=g) for name in ("delta_c", "cv_increment")
    }
    return UpdateBatch(deltas, num_samples, layout, stats, torch.arange(m), round=1,
                       extras=extras, num_steps=stats["num_steps"])


def time_rule(rule: str, batch: UpdateBatch, repeats: int) -> float:
    def once():
        agg = aggregators.build({"rule": rule})
        agg.setup(len(batch.deltas), batch.layout)  # N = m: every client takes part
        agg.aggregate(batch)

    return best_of(once, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet20"])
    parser.add_argument("--rules", nargs="+", default=aggregators.names())
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for model_name in args.models:
        model = build_model(model_name, SHAPES[model_name], 10, norm="group")
        layout = ParamLayout.from_model(model)
        for m in args.clients:
            batch = make_batch(layout, m)
            base = time_rule("fedavg", batch, args.repeats)
            for rule in args.rules:
                t = base if rule == "fedavg" else time_rule(rule, batch, args.repeats)
                rows.append({"model": model_name, "d": layout.dim, "m": m, "rule": rule,
                             "seconds": t, "x fedavg": t / base})
                print(f"{model_name} m={m} {rule}: {t:.4f}s ({t / base:.1f}x)", flush=True)
    print()
    print_table(rows, ["model", "d", "m", "rule", "seconds", "x fedavg"])


if __name__ == "__main__":
    main()
