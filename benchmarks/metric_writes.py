"""A cell's metric rows written into a new SQLite MLflow store, through MLflow's ``log_batch``
(500 rows a call) and through ``fedcore.tracking.metric_rows`` (one insert per batch),
alternately in one process: CPU seconds of each, their ratio, and whether the two runs read
back the same history and latest values.

The rows are one seed's cell of a main-job row (default FedAvg in CRAFT's protocol: 500
rounds, about 5,300 rows), handed over in batches as the tracker hands them (``--rounds``
rounds a batch; the tracker hands over what two seconds of training finished).

    .venv/bin/python -m benchmarks.metric_writes [--row ROW] [--rounds 25] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from fedcore.core.round.simulation import Simulation
from fedcore.specs.sweep import load_sweep
from fedcore.tracking.metric_rows import Row, insert_metric_rows, sql_store

from ._common import ROOT, temporary_folder


def cell_batches(row: str, rounds: int) -> list[list[Row]]:
    """The history of ``row``'s seed-0 cell as (key, value, timestamp, step) rows, ``rounds``
    rounds a batch."""
    spec = load_sweep(ROOT / "configs" / "sweeps" / "main.yaml")
    cell = next(c for c in spec.cells if c.row == row and c.config.seed == 0)
    history = Simulation(cell.config).run().history
    ts = int(time.time() * 1000)
    return [[(k, float(v), ts, int(h["round"])) for h in history[i : i + rounds]
             for k, v in h.items() if k != "round"] for i in range(0, len(history), rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", default="fedavg @craft")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = cell_batches(args.row, args.rounds)
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{temporary_folder('fedcore-metric-writes-')}/m.db")
    experiment = client.create_experiment("metric-writes")
    store = sql_store(client)
    assert store is not None

    def log_batch(run: str, rows: list[Row]) -> None:
        metrics = [Metric(*r) for r in rows]
        for i in range(0, len(metrics), 500):
            client.log_batch(run, metrics=metrics[i : i + 500])

    def insert(run: str, rows: list[Row]) -> None:
        assert insert_metric_rows(store, run, rows)

    ways: dict[str, Callable[[str, list[Row]], None]] = {"log_batch": log_batch,
                                                         "insert": insert}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    runs: dict[str, str] = {}
    for _ in range(args.repeats):
        for name, write in ways.items():
            run = client.create_run(experiment).info.run_id
            t0 = time.process_time()
            for rows in batches:
                write(run, rows)
            cpu[name].append(time.process_time() - t0)
            runs[name] = run
    same = all(
        [(m.step, m.value) for m in client.get_metric_history(runs["log_batch"], key)]
        == [(m.step, m.value) for m in client.get_metric_history(runs["insert"], key)]
        for key in {r[0] for rows in batches for r in rows}
    ) and client.get_run(runs["log_batch"]).data.metrics == client.get_run(
        runs["insert"]).data.metrics
    count = sum(len(b) for b in batches)
    best = {name: min(times) for name, times in cpu.items()}
    print(f"{args.row}: {count} rows in {len(batches)} batches, best of {args.repeats}")
    for name, seconds in best.items():
        print(f"  {name:9s} {seconds:6.3f} CPU-s  {1e6 * seconds / count:6.1f} µs a row")
    print(f"  log_batch / insert: x{best['log_batch'] / best['insert']:.2f}; "
          f"same history and latest values: {same}")


if __name__ == "__main__":
    main()
