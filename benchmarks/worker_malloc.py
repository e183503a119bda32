"""Training speed with and without Dask's worker memory setting, ``MALLOC_TRIM_THRESHOLD_``.

Dask starts each worker process with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``). Setting it turns off glibc's adaptive mmap threshold,
so every allocation of 128 KiB or more (the MLP's 200x200 weight, its gradient, the flat
parameter vectors) is mapped, faulted in and zeroed again at every step. fedcore's own
LocalCluster leaves it unset (``fedcore.flows.runners.lean_workers``).

Each measure is a fresh process that trains ``--cells`` cells of the main job
(``configs/sweeps/main.yaml``, look 1, spread over its rows) after one warm-up cell, untracked,
one torch thread; the two settings alternate ``--repeats`` times so that load on a shared
machine hits both alike, and the ratio of the medians of CPU seconds per cell is printed.

    .venv/bin/python -m benchmarks.worker_malloc [--cells 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks._common import ROOT, print_table

DASK_VALUE = "65536"


def child(cells: int) -> None:
    """Train ``cells`` main-job cells here; print {cpu, wall} per cell as JSON."""
    import torch

    from fedcore.core.round.simulation import Simulation
    from fedcore.specs.sweep import load_sweep

    torch.set_num_threads(1)
    look = load_sweep(ROOT / "configs" / "sweeps" / "main.yaml").cells_for_look(0)
    picked = look[1 :: max(1, len(look) // cells)][:cells]
    Simulation(look[0].config).run()  # warm-up: imports, first allocations
    cpu, wall = time.process_time(), time.perf_counter()
    for cell in picked:
        Simulation(cell.config).run()
    print(json.dumps({"cpu": (time.process_time() - cpu) / len(picked),
                      "wall": (time.perf_counter() - wall) / len(picked)}))


def measure(cells: int, trim: str | None) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    if trim is not None:
        env["MALLOC_TRIM_THRESHOLD_"] = trim
    out = subprocess.run([sys.executable, "-m", "benchmarks.worker_malloc", "--child",
                          str(cells)], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    times: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[dict[str, float]]] = {"unset": [], "dask's 65536": []}
    for _ in range(args.repeats):
        runs["unset"].append(measure(args.cells, None))
        runs["dask's 65536"].append(measure(args.cells, DASK_VALUE))
    medians = {k: {m: statistics.median(r[m] for r in v) for m in ("cpu", "wall")}
               for k, v in runs.items()}
    columns = ["MALLOC_TRIM_THRESHOLD_", "CPU s/cell", "wall s/cell", "CPU ratio"]
    print_table([dict(zip(columns, [k, v["cpu"], v["wall"], v["cpu"] / medians["unset"]["cpu"]],
                          strict=True)) for k, v in medians.items()], columns)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
