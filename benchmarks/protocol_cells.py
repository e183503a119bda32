"""What one cell of the main job costs, per protocol row: process CPU seconds of one seed's
simulation (no tracking), as a ratio to the default-recipe FedAvg cell run in the same process
(so that the machine's speed cancels), with a digest of the cell's history (every metric but
wall times) to check that a speed change left the numbers as they were.

    .venv/bin/python -m benchmarks.protocol_cells [ROW ...] [--out FILE.json]

Rows are the main sweep's row labels (``"fedavg @craft"``); default: one or two per protocol.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import torch

from fedcore.core.round.simulation import Simulation
from fedcore.specs.sweep import load_sweep

from ._common import ROOT

ROWS = ["fedavg", "fedavg @craft", "craft @craft", "fedlf @craft", "sapef_topk @sapef",
        "fedquad @fedquad", "moon @fedquad", "crf_fedavg @crf", "krum @crf", "fedoui @fedoui"]


def history_digest(history: list[dict[str, float]], summary: dict[str, float]) -> str:
    """sha256 (16 hex digits) of every metric of every round and the summary, wall times out."""
    def keep(m: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in sorted(m.items()) if "seconds" not in k and "time" not in k}

    blob = json.dumps([[keep(m) for m in history], keep(summary)], default=float)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", default=ROWS)
    parser.add_argument("--out", help="write {row: {cpu_s, ratio, digest}} here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = load_sweep(ROOT / "configs" / "sweeps" / "main.yaml")
    rows = ["fedavg", *[r for r in args.rows if r != "fedavg"]]
    out: dict[str, dict[str, float | str]] = {}
    for row in rows:
        cells = [c for c in spec.cells if c.row == row and c.config.seed == 0]
        if not cells:
            raise SystemExit(f"no row {row!r} in the main sweep")
        t0 = time.process_time()
        result = Simulation(cells[0].config).run()
        cpu = time.process_time() - t0
        base = float(out["fedavg"]["cpu_s"]) if out else cpu
        out[row] = {"cpu_s": round(cpu, 3), "ratio": round(cpu / base, 2),
                    "digest": history_digest(result.history, result.summary)}
        print(f"{row:22s} {cpu:6.2f} CPU-s  x{cpu / base:5.2f}  {out[row]['digest']}", flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
