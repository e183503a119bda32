"""What a sweep cell's stop check costs on a Dask worker: asking the scheduler whether the
sweep's stop event is set (``distributed.Event.is_set``) from a task on a one-worker
LocalCluster, ``--asks`` times, as the check once did at every round; then the same number of
checks through ``fedcore.flows.stopping.at_most_every`` (what a cell now does), which asks
at most every ``DASK_POLL_S``. Printed: the worker's and the scheduler's CPU per ask, and how
many asks the throttled checks made.

    .venv/bin/python -m benchmarks.dask_stop_poll [--asks 1000]
"""

from __future__ import annotations

import argparse
import time


def _ask(name: str, asks: int, throttled: bool) -> tuple[float, float, int]:
    """In a task: (worker CPU seconds, wall seconds, scheduler round trips) of ``asks`` checks."""
    from distributed import Event

    from fedcore.flows.stopping import DASK_POLL_S, at_most_every

    event = Event(name)
    trips = [0]

    def is_set() -> bool:
        trips[0] += 1
        return event.is_set()

    check = at_most_every(DASK_POLL_S, is_set) if throttled else is_set
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(asks):
        check()
    return time.process_time() - cpu, time.perf_counter() - wall, trips[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=1000)
    args = parser.parse_args()
    import psutil
    from distributed import Client, LocalCluster

    here = psutil.Process()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster) as client:
        client.submit(_ask, "warm-up", 10, False, pure=False).result()
        for throttled in (False, True):
            before = here.cpu_times()
            cpu, wall, trips = client.submit(_ask, "stop", args.asks, throttled,
                                             pure=False).result()
            after = here.cpu_times()
            scheduler = (after.user + after.system) - (before.user + before.system)
            how = "at_most_every" if throttled else "every check"
            print(f"{how:14s} {args.asks} checks, {trips} asks: worker {1e3 * cpu / args.asks:.3f}"
                  f" ms CPU a check, scheduler {1e3 * scheduler / args.asks:.3f} ms, wall "
                  f"{wall:.2f} s")


if __name__ == "__main__":
    main()
