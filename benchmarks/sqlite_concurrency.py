"""Processes logging into one SQLite MLflow store at once: metric rows lost, lock errors, retries.

    .venv/bin/python -m benchmarks.sqlite_concurrency --processes 8 --rounds 40 --keys 30

Each process creates a run and logs ``rounds`` batches of ``keys`` metrics, once through the raw
``MlflowClient`` and once through ``fedcore.tracking.mlflow_client`` (retry on "database is
locked"); the table counts the rows in the ``metrics`` table against the expected number.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import sqlite3
import time

from benchmarks._common import temporary_folder


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += "locked" in record.getMessage()


def _worker(args: tuple[str, str, bool, int, int]) -> tuple[str | None, int, int]:
    """(run id or None, calls that raised, retries after a lock)."""
    uri, exp_id, retry, rounds, keys = args
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from fedcore.tracking.retry import RetryingClient

    counter = _Count()
    logging.getLogger("fedcore").addHandler(counter)
    client = RetryingClient(MlflowClient(uri)) if retry else MlflowClient(uri)
    try:
        run_id = client.create_run(exp_id).info.run_id
    except Exception:  # noqa: BLE001  (counted, not fatal: the point is to count)
        return None, 1, counter.n
    errors = 0
    for r in range(1, rounds + 1):
        ts = int(time.time() * 1000)
        batch = [Metric(f"m{k}", float(r * k), ts, r) for k in range(keys)]
        try:
            client.log_batch(run_id, metrics=batch)
        except Exception:  # noqa: BLE001
            errors += 1
    return run_id, errors, counter.n


def measure(processes: int, rounds: int, keys: int, retry: bool) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    db = temporary_folder("fedcore-sqlite-") / "mlflow.db"
    uri = f"sqlite:///{db}"
    exp_id = MlflowClient(uri).create_experiment("concurrency")  # schema before the workers
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(processes) as pool:
        out = pool.map(_worker, [(uri, exp_id, retry, rounds, keys)] * processes)
    seconds = time.perf_counter() - t0
    with sqlite3.connect(db) as con:
        rows = sum(n for (n,) in con.execute("SELECT COUNT(*) FROM metrics"))
    expected = processes * rounds * keys
    return {"rows": rows, "expected": expected, "lost": expected - rows,
            "errors": sum(e for _, e, _ in out), "retries": sum(n for _, _, n in out),
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--keys", type=int, default=30)
    args = parser.parse_args()
    print("client    rows  expected  lost  errors  retries  seconds")
    for retry in (False, True):
        m = measure(args.processes, args.rounds, args.keys, retry)
        print(f"{'retrying' if retry else 'raw':8} {m['rows']:5d} {m['expected']:9d} "
              f"{m['lost']:5d} {m['errors']:7d} {m['retries']:8d} {m['seconds']:8.1f}")


if __name__ == "__main__":
    main()
