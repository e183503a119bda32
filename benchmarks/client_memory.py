"""Peak memory against the number of registered clients, and where a tracked run's end goes.

Memory (``--clients 100 2000``): FedAvg on the real MNIST digits (the 10,000 t10k images of
``../shared/data/mnist-t10k`` repacked 8,000 / 2,000 into a torchvision root, read by fedcore's
IDX loader), ``dataset.num_clients`` N, 10 clients a round, 1 local epoch, ``--rounds`` rounds,
the CNN, on the CPU. Each (N, untracked | tracked) runs in a fresh process, which reports its
resident memory after the imports, after ``Simulation(cfg)`` (data partitioned, model built)
and its peak (``ru_maxrss``) after the run; the last line is the peak's growth per client
between the smallest and the largest N.

Run end (``--end``): in one warm process, on the task of ``benchmarks.overhead`` (digits, 20
clients, 5 per round, ``--end-rounds`` rounds), the median over ``--repeats`` of an untracked
and a tracked run, and of the parts of the tracked run's end (``MLflowTracker._finish``: the
model logged as an MLflow Model, the per-client table, waiting for the figure helper, stopping
the system-metrics sampler, the summary metrics and FINISHED).

    .venv/bin/python -m benchmarks.client_memory [--clients 100 2000] [--rounds 2]
        [--end] [--end-rounds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, print_table, shared_mnist_root

MB = 2**20


def _resident() -> float:
    """This process's resident memory now, MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / MB


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def one(mode: str, clients: int, rounds: int, root: str, store: str) -> dict[str, float]:
    """One measure in this (fresh) process."""
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store}/mlflow.db"
    os.environ["FEDCORE_ARTIFACT_LOCATION"] = f"{store}/artifacts"
    import torch

    torch.set_num_threads(1)
    from fedcore.core.compose.configure import load_config
    from fedcore.core.round.simulation import Simulation

    out = {"imported": _resident()}
    cfg = load_config(None, [
        "dataset.name=mnist", f"dataset.root={root}", f"dataset.num_clients={clients}",
        "dataset.min_samples=1", "clients_per_round=10", f"rounds={rounds}", "local.epochs=1",
        "model.name=cnn", "device=cpu", "seed=0",
    ])
    sim = Simulation(cfg)
    out["built"] = _resident()
    if mode == "tracked":
        from fedcore.tracking.runner import run_tracked

        del sim
        run_tracked(cfg)
    else:
        sim.run()
    out["after_run"] = _resident()
    out["peak"] = _peak()
    return out


def memory(clients: list[int], rounds: int) -> None:
    root = shared_mnist_root()
    if root is None:
        raise SystemExit("the MNIST t10k files (../shared/data/mnist-t10k) are not here")
    rows = []
    for n in clients:
        for mode in ("untracked", "tracked"):
            with tempfile.TemporaryDirectory() as store:
                env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
                proc = subprocess.run(
                    [sys.executable, "-m", "benchmarks.client_memory", "--one", mode, str(n),
                     str(rounds), str(root), store],
                    env=env, cwd=ROOT, capture_output=True, text=True, check=False)
            if proc.returncode:
                raise RuntimeError(f"{mode} {n}: {proc.stderr[-2000:]}")
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append({"clients": n, "run": mode, **{k: round(v) for k, v in got.items()}})
    print_table(rows, ["clients", "run", "imported", "built", "after_run", "peak"])
    lo, hi = min(clients), max(clients)
    for mode in ("untracked", "tracked"):
        a, b = (next(r["peak"] for r in rows if r["clients"] == n and r["run"] == mode)
                for n in (lo, hi))
        print(f"{mode}: peak {a} MB at {lo} clients, {b} MB at {hi}: "
              f"{(b - a) / (hi - lo) * 1024:.0f} KB per client")


def _timed(table: dict[str, float], label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            table[label] += time.perf_counter() - t0

    return wrapper


def run_end(rounds: int, repeats: int) -> None:
    store = tempfile.mkdtemp(prefix="fedcore-end-")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store}/mlflow.db"
    os.environ["FEDCORE_ARTIFACT_LOCATION"] = f"{store}/artifacts"
    import torch

    torch.set_num_threads(1)
    from benchmarks._fresh import TASK
    from fedcore.core.compose.configure import load_config
    from fedcore.core.round.simulation import Simulation
    from fedcore.tracking import figure_helper, run_store
    from fedcore.tracking.mlflow_tracker import MLflowTracker
    from fedcore.tracking.runner import run_tracked

    parts: dict[str, float] = defaultdict(float)
    store_cls = run_store.MlflowRunStore
    for name in ("log_model", "write_client_tables", "stop_system_metrics", "terminate",
                 "log_artifacts"):
        setattr(store_cls, name, _timed(parts, name, getattr(store_cls, name)))
    drawing = figure_helper.Drawing
    drawing.wait = _timed(parts, "figures wait", drawing.wait)  # type: ignore[method-assign]
    MLflowTracker._finish = _timed(parts, "run end (_finish)", MLflowTracker._finish)
    samples: dict[str, list[float]] = defaultdict(list)
    for seed in range(repeats + 1):  # the first one warms the process up (imports, store)
        cfg = load_config(None, [*TASK, f"rounds={rounds}", f"seed={seed}"])
        parts.clear()
        t0 = time.perf_counter()
        Simulation(cfg).run()
        untracked = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_tracked(cfg)
        tracked = time.perf_counter() - t0
        if seed == 0:
            continue
        samples["untracked run"].append(untracked)
        samples["tracked run"].append(tracked)
        samples["tracked - untracked"].append(tracked - untracked)
        for key, value in parts.items():
            samples[key].append(value)
    rows = [{"part": k, "median s": statistics.median(v), "min s": min(v)}
            for k, v in samples.items()]
    print_table(rows, ["part", "median s", "min s"])
    print(f"load average: {os.getloadavg()[0]:.2f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        mode, n, rounds, root, store = sys.argv[2:7]
        print(json.dumps(one(mode, int(n), int(rounds), root, store)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 2000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--end", action="store_true", help="only the tracked run's end")
    parser.add_argument("--end-rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.end:
        run_end(args.end_rounds, args.repeats)
    else:
        memory(args.clients, args.rounds)


if __name__ == "__main__":
    main()
