"""Speed of the whole run, as ratios measured in one process (issue 15's targets).

The task: digits, the 2-conv CNN, 20 clients, 5 per round, 1 local epoch of batch 32, lr 0.05,
20 rounds, evaluation every round, one torch thread. Printed, in one run:

- floor: a bare PyTorch loop running the same SGD steps (same clients, same batches) and the same
  global test-set evaluations on one model;
- untracked: ``Simulation(cfg).run()``, over the floor (target <= 1.15);
- tracked: ``run_tracked`` into a fresh SQLite MLflow store, over untracked (target <= 1.25),
  waiting for the run's end (figures, FINISHED), and as a sweep cell runs it (``wait=False``:
  the run's end is written in the background while the next cell trains);
- fixed cost: the whole process ``fedcore run rounds=1 model.name=mlp`` minus
  ``python -c "import torch"`` (target <= 1.5 s);
- ``fedcore --help`` and a config error, as whole processes (target < 0.5 s each).

In-process figures are the best of ``--repeats`` (default 3), the measures alternating;
processes the best of ``--process-repeats`` (default 2), alternating too. ``--process-only``
skips the in-process measures; ``--baseline DIR`` also times ``fedcore run`` of another checkout
(e.g. ``git worktree add /tmp/before HEAD~1``) between this one's, for a before/after figure on
a loaded machine. Processes also show their CPU time (user + system, all threads; ``cpu s``),
which other jobs on a shared machine inflate far less than wall time.

    .venv/bin/python -m benchmarks.overhead [--rounds 20] [--repeats 3] [--process-only]
        [--process-repeats 2] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks._common import ROOT, print_table
from benchmarks.round_overhead import bare_round
from fedcore.core.callbacks.evaluation import client_tests
from fedcore.core.compose.configure import load_config
from fedcore.core.round.simulation import Simulation

TASK = ["model.name=cnn", "dataset.num_clients=20", "clients_per_round=5", "local.epochs=1",
        "local.batch_size=32", "local.lr=0.05", "eval_every=1", "seed=0", "device=cpu"]


def bare_loop(sim: Simulation, rounds: int, client_splits: bool = False) -> None:
    """The same clients, batches and SGD steps on one model, and one test-set pass per round
    (with ``client_splits``, one more over the clients' local test splits, as the simulation's
    per-client metrics need)."""
    model = sim.model
    opt = torch.optim.SGD(model.parameters(), lr=sim.cfg.local.lr)
    x_test, y_test = sim.data.x_test, sim.data.y_test
    tests = client_tests(sim.data)
    for r in range(1, rounds + 1):
        bare_round(sim, r, model, opt)
        model.eval()
        with torch.no_grad():
            logits = model(x_test)
            float((logits.argmax(1) == y_test).float().mean())
            float(torch.nn.functional.cross_entropy(logits, y_test))
            if client_splits:
                float((model(tests.x).argmax(1) == tests.y).float().mean())


def process_seconds(
    commands: dict[str, tuple[list[str], dict[str, str], Path]], repeats: int = 2
) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall time and best CPU time (user + system, all threads) of each whole process
    (start-up included), the commands alternating: ``name -> (argv, env, cwd)``. CPU time is
    less inflated than wall time by other jobs on a shared machine."""
    wall = dict.fromkeys(commands, float("inf"))
    cpu = dict.fromkeys(commands, float("inf"))
    for _ in range(repeats):
        for name, (argv, env, cwd) in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            wall[name] = min(wall[name], time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            cpu[name] = min(cpu[name], used)
    return wall, cpu


def in_process(rounds: int, repeats: int, store: Path) -> dict[str, float]:
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store / 'mlflow.db'}"
    os.environ["FEDCORE_ARTIFACT_LOCATION"] = str(store / "artifacts")
    from fedcore.tracking.runner import run_tracked
    from fedcore.tracking.writers import wait_for_runs

    cfg = load_config(None, [*TASK, f"rounds={rounds}"])
    data = Simulation(cfg).data

    def background() -> None:  # a sweep cell's path: the run's end is written meanwhile
        run_tracked(cfg, data=data, wait=False)

    measures = {
        "floor": lambda: bare_loop(Simulation(cfg, data=data), rounds),
        "floor_clients": lambda: bare_loop(Simulation(cfg, data=data), rounds, True),
        "untracked": lambda: Simulation(cfg, data=data).run(),
        "tracked": lambda: run_tracked(cfg, data=data),
        "background": background,
    }
    best = dict.fromkeys(measures, float("inf"))
    for _ in range(repeats):  # alternating, so a burst of load hits every measure alike
        for name, fn in measures.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
            wait_for_runs()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--process-repeats", type=int, default=2)
    parser.add_argument("--process-only", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout to time fedcore run of")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fedcore-overhead-") as tmp:
        store = Path(tmp)
        times = {} if args.process_only else in_process(args.rounds, args.repeats, store)
        process, cpu = process_seconds(_process_commands(store, args.baseline),
                                       args.process_repeats)
    rows = [] if args.process_only else _in_process_rows(times)
    torch_s, torch_cpu = process["torch"], cpu["torch"]

    def above_torch(name: str, label: str, target: str = "") -> dict[str, object]:
        return {"measure": f"{label} - import torch", "seconds": process[name] - torch_s,
                "ratio": process[name] / torch_s, "cpu s": cpu[name] - torch_cpu,
                "target": target}

    def whole(name: str, label: str, target: str = "") -> dict[str, object]:
        return {"measure": label, "seconds": process[name], "ratio": process[name] / torch_s,
                "cpu s": cpu[name], "target": target}

    rows.append({**whole("torch", "python -c 'import torch'"), "ratio": ""})
    if args.baseline:
        rows.append(above_torch("baseline", f"baseline {args.baseline}: fedcore run"))
    rows += [
        above_torch("run", "fedcore run rounds=1 (mlp)", "<= 1.5 s"),
        whole("help", "fedcore --help", "< 0.5 s"),
        whole("error", "config error (rounds=zero)", "< 0.5 s"),
    ]
    runs = "" if args.process_only else f"{args.rounds} rounds, best of {args.repeats}; "
    print(f"{runs}processes best of {args.process_repeats}; ratio of a process: over import torch")
    print_table(rows, ["measure", "seconds", "ratio", "cpu s", "target"])


def _process_commands(
    store: Path, baseline: Path | None
) -> dict[str, tuple[list[str], dict[str, str], Path]]:
    """The whole processes to time: each checkout's ``fedcore run`` writes its own new store
    (the first repeat creates it, the next ones reuse it, as a user's store)."""
    def env(root: Path, name: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1",
                "MLFLOW_TRACKING_URI": f"sqlite:///{store / name}.db",
                "FEDCORE_ARTIFACT_LOCATION": str(store / f"{name}-artifacts")}

    py = sys.executable
    run = ["-m", "fedcore.cli", "run", "rounds=1", "model.name=mlp"]
    commands = {"torch": ([py, "-c", "import torch"], env(ROOT, "cli"), ROOT),
                "run": ([py, *run], env(ROOT, "cli"), ROOT)}
    if baseline is not None:
        root = baseline.resolve()
        commands["baseline"] = ([py, *run], env(root, "baseline"), root)
    commands["help"] = ([py, "-m", "fedcore.cli", "--help"], env(ROOT, "cli"), ROOT)
    commands["error"] = ([py, "-m", "fedcore.cli", "run", "rounds=zero"], env(ROOT, "cli"), ROOT)
    return commands


def _in_process_rows(times: dict[str, float]) -> list[dict[str, object]]:
    rows = [
        {"measure": "floor (bare loop)", "seconds": times["floor"], "ratio": 1.0,
         "target": ""},
        {"measure": "floor + clients' test splits", "seconds": times["floor_clients"],
         "ratio": times["floor_clients"] / times["floor"], "target": ""},
        {"measure": "untracked / floor", "seconds": times["untracked"],
         "ratio": times["untracked"] / times["floor"], "target": "<= 1.15"},
        {"measure": "untracked / (floor + client splits)", "seconds": times["untracked"],
         "ratio": times["untracked"] / times["floor_clients"], "target": ""},
        {"measure": "tracked / untracked", "seconds": times["tracked"],
         "ratio": times["tracked"] / times["untracked"], "target": "<= 1.25"},
        {"measure": "tracked, run end in background / untracked",
         "seconds": times["background"], "ratio": times["background"] / times["untracked"],
         "target": "<= 1.25"},
    ]
    return [{**row, "cpu s": ""} for row in rows]


if __name__ == "__main__":
    main()
