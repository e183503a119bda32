"""The MLP's written-out step against autograd, in one process: one seed's cell of a few main-
job rows, run alternately with the written-out step (``fedcore.core.models.mlp_step``) and
with autograd (the step turned off), CPU seconds of each and their ratio, and the two
histories' digests, which must be equal (the step gives autograd's bits).

    .venv/bin/python -m benchmarks.mlp_step [ROW ...] [--repeats N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from fedcore.core.clients import template
from fedcore.core.round.simulation import Simulation
from fedcore.core.stages.feedback import mismatch
from fedcore.specs.sweep import load_sweep

from ._common import ROOT
from .protocol_cells import history_digest

ROWS = ["fedavg @craft", "crf_fedavg @crf", "sapef_topk @sapef"]


@contextmanager
def autograd_only() -> Iterator[None]:
    """The sequential engine and SA-PEF's probe without the written-out step."""
    saved = template.written_out_step, mismatch.mlp_step_for
    template.written_out_step = lambda *args: None  # type: ignore[assignment]
    mismatch.mlp_step_for = lambda *args: None  # type: ignore[assignment]
    try:
        yield
    finally:
        template.written_out_step, mismatch.mlp_step_for = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", default=ROWS)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = load_sweep(ROOT / "configs" / "sweeps" / "main.yaml")
    for row in args.rows:
        cell = next(c for c in spec.cells if c.row == row and c.config.seed == 0)
        cpu = {"written out": 0.0, "autograd": 0.0}
        digests = set()
        for _ in range(args.repeats):
            for name in cpu:
                t0 = time.process_time()
                if name == "autograd":
                    with autograd_only():
                        result = Simulation(cell.config).run()
                else:
                    result = Simulation(cell.config).run()
                cpu[name] += (time.process_time() - t0) / args.repeats
                digests.add(history_digest(result.history, result.summary))
        same = "same history" if len(digests) == 1 else "HISTORIES DIFFER"
        print(f"{row:22s} written out {cpu['written out']:5.2f} CPU-s, autograd "
              f"{cpu['autograd']:5.2f}: x{cpu['autograd'] / cpu['written out']:.2f} ({same})",
              flush=True)


if __name__ == "__main__":
    main()
