"""Top-k and error-feedback cost per client, residual store memory (docs/methods/compression.md).

    .venv/bin/python -m benchmarks.compression [--models cnn resnet20] [--clients 1000]

Times are the best of ``--repeats`` calls on this machine's CPU (or the GPU with --device cuda).
The store is measured by the bytes of the residual tensors really held by a ClientStore filled
for ``--sample`` clients, extrapolated linearly to ``--clients`` (nothing beyond that is allocated).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks._common import best_of, print_table
from fedcore.core import compression
from fedcore.core.models import build_model
from fedcore.core.models.layout import ParamLayout
from fedcore.core.records import LocalSchedule
from fedcore.core.round.simulation import ClientStore
from fedcore.core.stages.feedback import RESIDUAL, build_feedback

SHAPES = {"cnn": (1, 28, 28), "resnet20": (3, 32, 32), "mlp": (1, 28, 28)}


def store_bytes(store: ClientStore, n: int) -> int:
    return sum(store[k][RESIDUAL].untyped_storage().nbytes() for k in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet20"])
    parser.add_argument("--k-fracs", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for name in args.models:
        model = build_model(name, SHAPES[name], 10, norm="batch")
        d = ParamLayout.from_model(model).dim
        delta = torch.randn(d, generator=torch.Generator().manual_seed(0)).to(device)
        for k_frac in args.k_fracs:
            spec = {"compressor": "topk", "k_frac": k_frac}
            topk = compression.build(spec)
            sapef = build_feedback({**spec, "error_feedback": "sapef"})
            sapef.begin_round(2, LocalSchedule())
            state = {RESIDUAL: torch.zeros_like(delta)}

            def plain(c=topk, delta=delta):
                c.apply(delta)
                sync()

            def with_ef(c=sapef, s=state, delta=delta, op=topk.apply):
                c.compress(op, delta, s)
                sync()

            store = ClientStore()
            for k in range(args.sample):
                sapef.compress(topk.apply, delta, store[k])
            per_client = store_bytes(store, args.sample) / args.sample
            rows.append(
                {
                    "model": name,
                    "d": d,
                    "k_frac": k_frac,
                    "topk ms": 1e3 * best_of(plain, args.repeats),
                    "topk+EF ms": 1e3 * best_of(with_ef, args.repeats),
                    "bytes up": topk.apply(delta)[1],
                    f"store GB ({args.clients} cl.)": per_client * args.clients / 1e9,
                }
            )
            print(rows[-1], flush=True)
    print()
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
