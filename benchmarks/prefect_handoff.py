"""How long a sweep cell waits between tasks with and without a ``gpu`` tag concurrency limit.

Every sweep cell is a Prefect task tagged ``gpu``. With a ``gpu`` tag limit of as many slots as
cells run at once (what fedcore's sweep flow used to create on its own temporary server), a
worker's next task asked for its slot while the last one's was still being released, was
refused, and waited for Prefect's retry (about 1-2 s), once per cell. fedcore now sets no limit
itself (``fedcore/flows/server.py``).

One flow on fedcore's temporary Prefect server runs ``--tasks`` tasks of 1 s of busy work
(about half a main-job cell) on one thread, tagged as sweep cells are: first without a ``gpu``
limit, then with a limit of 1 slot, alternated ``--repeats`` times. Printed: the median wall
time from one task's end to the next one's (the hand-off included), and its ratio to the run
without a limit. The wait grows with the tasks' length (0.2 s tasks barely wait, 0.5 s tasks
waited 1.9 s each here): it is Prefect's retry after a refused slot, not fedcore's work.

    .venv/bin/python -m benchmarks.prefect_handoff [--tasks 6] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks._common import print_table

WORK_S = 1.0


def busy(seconds: float) -> float:
    """Spin for ``seconds`` (CPU work, as a cell's training is); returns when it ended."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return time.perf_counter()


def per_task(tasks: int, limit: int | None) -> float:
    """Median seconds between consecutive task ends, ``tasks`` tasks on one thread."""
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.task_runners import ThreadPoolTaskRunner

    from fedcore.flows.runners import GPU_TAG

    cell = task(busy, name="cell", tags=["fedcore-sim", GPU_TAG])

    @flow(name="handoff", task_runner=ThreadPoolTaskRunner(max_workers=1))
    def run() -> list[float]:
        futures = [cell.submit(WORK_S) for _ in range(tasks)]
        return [f.result() for f in futures]

    with get_client(sync_client=True) as client:
        if limit is not None:
            client.create_concurrency_limit(tag=GPU_TAG, concurrency_limit=limit)
        try:
            ends = run()
        finally:
            try:
                client.delete_concurrency_limit_by_tag(GPU_TAG)
            except ObjectNotFound:
                pass
    return statistics.median(b - a for a, b in zip(ends[:-1], ends[1:], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    import fedcore.flows  # noqa: F401  (fedcore's offline Prefect settings)
    from fedcore.flows.server import prefect_api

    runs: dict[str, list[float]] = {"no gpu limit": [], "gpu limit of 1 slot": []}
    with prefect_api():
        for _ in range(args.repeats):
            runs["no gpu limit"].append(per_task(args.tasks, None))
            runs["gpu limit of 1 slot"].append(per_task(args.tasks, 1))
    base = statistics.median(runs["no gpu limit"])
    columns = ["tasks tagged gpu", "s per task", "of which work", "ratio"]
    print_table([dict(zip(columns, [k, statistics.median(v), WORK_S,
                                    statistics.median(v) / base], strict=True))
                 for k, v in runs.items()], columns)


if __name__ == "__main__":
    main()
