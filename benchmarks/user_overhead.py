"""Speed of the whole run as a user meets it: fresh processes, a new store and an existing one.

The task of ``benchmarks.overhead`` (digits, the 2-conv CNN, 20 clients, 5 per round, 1 local
epoch of batch 32, lr 0.05, ``--rounds`` rounds, evaluation every round, one torch thread). Every
measure runs in its own fresh Python process (``benchmarks/_fresh.py``), with no warm-up, and the
median of ``--processes`` is printed (CPU time, user + system of all threads, beside wall time):

- untracked / bare loop: ``Simulation(cfg).run()`` over the same SGD steps and evaluations on one
  model (both building their data and model inside the timed part; target <= 1.15);
- tracked into an existing store / untracked: the same task as a whole ``fedcore run`` process
  (its MLflow writes in a writer process) minus ``python -c "import torch"`` (what the fresh
  measures leave out of their timed part; target <= 1.10), and ``run_tracked`` in the process,
  as a program using fedcore as a library calls it;
- tracked into a new store, minus into an existing one (the schema's price), both ways;
- whole processes: ``fedcore run rounds=1 model.name=mlp`` above ``python -c "import torch"``
  (target <= 1.0 s), into a new store (a user's very first run) and again into that store (the
  second run; target: first - second <= 0.5 s).

The measures alternate (and, with ``--baseline DIR``, each is followed by the same measure of
another checkout, e.g. ``git archive HEAD~1 | tar -x -C DIR``), so a burst of load on a shared
machine hits all alike; ratios are of medians measured in this one run. The load average is
printed before and after. ``--in-process`` also prints ``benchmarks.overhead``'s best of 3 in
one warm process.

    .venv/bin/python -m benchmarks.user_overhead [--rounds 20] [--processes 3]
        [--baseline DIR] [--in-process]
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
from pathlib import Path

from benchmarks._common import ROOT, print_table
from benchmarks._fresh import TASK

FRESH = Path(__file__).resolve().parent / "_fresh.py"
RUN = ["-m", "fedcore.cli", "run", "rounds=1", "model.name=mlp"]


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}


def fresh(root: Path, measure: str, rounds: int, store: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one measure in a new process of the checkout at ``root``."""
    out = subprocess.run([sys.executable, str(FRESH), measure, str(rounds), str(store)],
                         env=_env(root), cwd=root, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{measure} in {root} failed:\n{out.stderr[-3000:]}")
    times = json.loads(out.stdout.strip().splitlines()[-1])
    return times["wall"], times["cpu"]


def whole(root: Path, argv: list[str], store: Path) -> tuple[float, float]:
    """(wall s, CPU s) of a whole process (start-up and exit included) into ``store``."""
    env = {**_env(root), "MLFLOW_TRACKING_URI": f"sqlite:///{store}/mlflow.db",
           "FEDCORE_ARTIFACT_LOCATION": f"{store}/artifacts"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = subprocess.run([sys.executable, *argv], env=env, cwd=root, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        raise RuntimeError(f"{argv} in {root} exited {code}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def measure_all(roots: dict[str, Path], rounds: int, processes: int,
                tmp: Path) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Every measure of every checkout ``processes`` times, alternating."""
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def add(label: str, name: str, value: tuple[float, float]) -> None:
        samples.setdefault((label, name), []).append(value)

    existing = {label: tmp / f"{label}-existing" for label in roots}
    for label, root in roots.items():  # the existing stores: one run each beforehand
        fresh(root, "tracked", 1, existing[label])
        whole(root, [*RUN[:3], *TASK, "rounds=1"], tmp / f"{label}-task")
    for i in range(processes):
        for label, root in roots.items():
            add(label, "torch", whole(root, ["-c", "import torch"], tmp))
            new_cli = tmp / f"{label}-cli-{i}"
            add(label, "run_first", whole(root, RUN, new_cli))
            add(label, "run_second", whole(root, RUN, new_cli))
            task = [*RUN[:3], *TASK, f"rounds={rounds}"]
            add(label, "task_cli", whole(root, task, tmp / f"{label}-task"))  # an existing store
            add(label, "task_cli_new", whole(root, task, tmp / f"{label}-task-new-{i}"))
        for name in ("bare", "untracked", "tracked", "tracked_new"):
            for label, root in roots.items():
                store = tmp / f"{label}-{name}-{i}" if name.endswith("_new") else existing[label]
                add(label, name, fresh(root, name.removesuffix("_new"), rounds, store))
    return samples


def rows_of(label: str, med: dict[str, tuple[float, float]]) -> list[dict[str, object]]:
    def ratio(a: str, b: str, what: str, target: str) -> dict[str, object]:
        return {"checkout": label, "measure": what, "wall s": med[a][0],
                "ratio (wall)": med[a][0] / med[b][0], "cpu s": med[a][1],
                "ratio (cpu)": med[a][1] / med[b][1], "target": target}

    def diff(a: str, b: str, what: str, target: str) -> dict[str, object]:
        return {"checkout": label, "measure": what, "wall s": med[a][0] - med[b][0],
                "ratio (wall)": "", "cpu s": med[a][1] - med[b][1], "ratio (cpu)": "",
                "target": target}

    return [
        {**ratio("bare", "bare", "bare loop", ""), "ratio (wall)": "", "ratio (cpu)": ""},
        ratio("untracked", "bare", "untracked / bare loop", "<= 1.15"),
        {**ratio("task_cli", "untracked", "fedcore run (whole process) - import torch, "
                 "existing store / untracked", "<= 1.10"),
         "wall s": med["task_cli"][0] - med["torch"][0],
         "ratio (wall)": (med["task_cli"][0] - med["torch"][0]) / med["untracked"][0],
         "cpu s": med["task_cli"][1] - med["torch"][1],
         "ratio (cpu)": (med["task_cli"][1] - med["torch"][1]) / med["untracked"][1]},
        diff("task_cli_new", "task_cli", "fedcore run (whole process): new store - existing",
             ""),
        ratio("tracked", "untracked", "run_tracked in-process, existing store / untracked", ""),
        ratio("tracked_new", "bare", "run_tracked in-process, new store / bare loop", ""),
        diff("tracked_new", "tracked", "run_tracked in-process: new store - existing", ""),
        {**ratio("torch", "torch", "python -c 'import torch'", ""), "ratio (wall)": "",
         "ratio (cpu)": ""},
        diff("run_second", "torch", "fedcore run rounds=1 (2nd run) - import torch", "<= 1.0 s"),
        diff("run_first", "torch", "fedcore run rounds=1 (new store) - import torch", ""),
        diff("run_first", "run_second", "fedcore run: first run - second run", "<= 0.5 s"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alternately")
    parser.add_argument("--in-process", action="store_true",
                        help="also benchmarks.overhead's best of 3 in one warm process")
    args = parser.parse_args()
    roots = {"this": ROOT}
    if args.baseline is not None:
        roots["baseline"] = args.baseline.resolve()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fedcore-user-overhead-") as tmp:
        samples = measure_all(roots, args.rounds, args.processes, Path(tmp))
        warm = None
        if args.in_process:
            from benchmarks.overhead import in_process

            warm = in_process(args.rounds, 3, Path(tmp) / "warm")
    load_after = os.getloadavg()
    rows = []
    for label in roots:
        med = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
               for (lab, name), v in samples.items() if lab == label}
        rows += rows_of(label, med)
    print(f"{args.rounds} rounds; medians of {args.processes} fresh processes, alternating; "
          f"{os.cpu_count()} CPUs, one torch thread; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print_table(rows, ["checkout", "measure", "wall s", "ratio (wall)", "cpu s", "ratio (cpu)",
                       "target"])
    if warm is not None:
        print("\nin one warm process, best of 3 (benchmarks.overhead):")
        print_table([{"measure": "untracked / floor", "ratio": warm["untracked"] / warm["floor"]},
                     {"measure": "untracked / (floor + client splits)",
                      "ratio": warm["untracked"] / warm["floor_clients"]},
                     {"measure": "tracked / untracked",
                      "ratio": warm["tracked"] / warm["untracked"]}], ["measure", "ratio"])


if __name__ == "__main__":
    main()
