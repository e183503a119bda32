"""Paper recipes on synthetic CIFAR-10, timed per round with each engine: the table of
``benchmarks/gpu_check.sh`` (docs/how-to/gpu.md).

    python3 -m benchmarks.gpu_recipes --device cuda --rounds 10 --out $OUT/gpu_table.md
    python3 -m benchmarks.gpu_recipes --device cpu --rounds 1 --tiny   # the dry run

Runs, in this order, until ``--budget`` seconds are spent (the rest are listed as skipped):
the CRAFT CIFAR-10 recipe (configs/experiments/craft.yaml: ResNet-20 GroupNorm, 1,000 clients,
100 per round) vectorised and sequential, untracked then tracked (MLflow into a temporary SQLite
store); then FedAvg in CRAFT's setting, FedQuad (200 clients, 10 per round) and SA-PEF (100
clients, 10 per round; ResNet-20 with BatchNorm, so sequential only), untracked, each engine
that applies. Every run plays ``--warmup`` rounds, then ``--rounds`` timed ones.

Columns: median seconds of the timed rounds without evaluation; the extra seconds of an
evaluated round; setup and end (data, model, tracking's run end: the run's wall time less its
rounds); the projection to 500 rounds (500 x median + evaluations x extra + setup and end);
peak GPU memory (``torch.cuda.max_memory_allocated``); mean GPU utilisation over the timed
rounds (sampled every 0.2 s); vectorised/sequential time per round. ``--tiny`` shrinks every
recipe (200 images, 8 clients, 4 per round, one local epoch) for a CPU dry run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fedcore.core.callbacks import Callback, RoundRecord
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ExperimentConfig, config_dir
from fedcore.core.data.federated import FederatedData, build_federated_data
from fedcore.core.engines.select import vectorised_blocker
from fedcore.core.records.run import RunView
from fedcore.core.round.simulation import Simulation, resolve_device

EXPERIMENTS = config_dir() / "experiments"
PROJECT_ROUNDS = 500
SYNTHETIC = ["dataset.name=synthetic_cifar10"]
TINY = ["dataset.synthetic_samples=200", "dataset.num_clients=8", "clients_per_round=4",
        "dataset.min_samples=5", "local.epochs=1", "local.steps=null"]


@dataclass(frozen=True)
class Case:
    label: str
    recipe: str
    overrides: tuple[str, ...] = ()
    tracked: bool = False  # also run tracked


CASES = (
    Case("CRAFT", "craft.yaml", tracked=True),
    Case("FedAvg (CRAFT's setting)", "craft.yaml", ("method=fedavg",)),
    Case("FedQuad", "fedquad.yaml"),
    Case("SA-PEF", "sapef.yaml"),
)


@dataclass
class Row:
    recipe: str
    engine: str
    tracked: bool
    clients: str = ""
    round_s: float | None = None
    eval_extra_s: float | None = None
    setup_end_s: float | None = None
    projected_min: float | None = None
    peak_gib: float | None = None
    gpu_util: float | None = None
    note: str = ""
    times: list[float] = field(default_factory=list)


class RoundTimer(Callback):
    """Wall seconds of each round (the device synchronised at each round's end)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.times, self.evaluated = device, [], []
        self.last = time.perf_counter()

    def on_run_start(self, run: RunView) -> None:
        self._sync()
        self.last = time.perf_counter()

    def on_round_end(self, record: RoundRecord) -> None:
        self._sync()
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now
        cfg = record.run.cfg
        self.evaluated.append(record.round % cfg.eval_every == 0 or record.round == cfg.rounds)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class Utilisation:
    """GPU utilisation sampled in a thread (torch.cuda.utilization, else nvidia-smi)."""

    def __init__(self, device: torch.device, every: float = 0.2) -> None:
        self.device, self.every = device, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Utilisation:
        if self.device.type == "cuda":
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _read(self) -> float | None:
        try:
            return float(torch.cuda.utilization(self.device))
        except Exception:  # noqa: BLE001  (no pynvml: ask nvidia-smi)
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=5, check=True)
                return float(out.stdout.split()[0])
            except Exception:  # noqa: BLE001
                return None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            value = self._read()
            if value is not None:
                self.samples.append((time.perf_counter(), value))

    def mean(self, start: float, stop: float) -> float | None:
        inside = [v for t, v in self.samples if start <= t <= stop]
        return statistics.fmean(inside) if inside else None


def config(case: Case, engine: str, args: argparse.Namespace) -> ExperimentConfig:
    over = [*SYNTHETIC, *case.overrides, f"engine={engine}", f"device={args.device}",
            f"rounds={args.warmup + args.rounds}"]
    return load_config(EXPERIMENTS / case.recipe, [*over, *(TINY if args.tiny else [])])


def time_run(cfg: ExperimentConfig, data: FederatedData, tracked: bool,
             args: argparse.Namespace, row: Row) -> None:
    device = resolve_device(cfg.device)
    timer = RoundTimer(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with Utilisation(device) as util:
        t0 = time.perf_counter()
        if tracked:
            from fedcore.tracking.runner import run_tracked

            run_tracked(cfg, callbacks=[timer], data=data, resume=False)
            engine = cfg.engine.backend
        else:
            sim = Simulation(cfg, callbacks=[timer], data=data)
            sim.run()
            engine = sim.engine_name
        total = time.perf_counter() - t0
    timed = list(zip(timer.times, timer.evaluated, strict=True))[args.warmup:]
    plain = [t for t, ev in timed if not ev] or [t for t, _ in timed]
    evals = [t for t, ev in timed if ev]
    row.engine, row.times = engine, timer.times
    row.round_s = statistics.median(plain)
    row.eval_extra_s = max(0.0, statistics.fmean(evals) - row.round_s) if evals else 0.0
    row.setup_end_s = total - sum(timer.times)
    evaluations = PROJECT_ROUNDS // cfg.eval_every
    row.projected_min = (PROJECT_ROUNDS * row.round_s + evaluations * row.eval_extra_s
                         + row.setup_end_s) / 60
    if device.type == "cuda":
        row.peak_gib = torch.cuda.max_memory_allocated(device) / 2**30
        start = t0 + sum(timer.times[: args.warmup])
        row.gpu_util = util.mean(start, t0 + sum(timer.times))


def plan(args: argparse.Namespace) -> list[tuple[Case, str, bool]]:
    """(case, engine, tracked) in the order they run: CRAFT first, untracked before tracked."""
    runs = []
    for case in CASES:
        for tracked in (False, True) if case.tracked else (False,):
            runs += [(case, engine, tracked) for engine in ("vectorised", "sequential")]
    return runs


def run_all(args: argparse.Namespace) -> tuple[list[Row], dict[str, float]]:
    """Every planned run; the table is rewritten after each, so a call stopped at its time
    limit still returns the runs so far."""
    rows: list[Row] = []
    data_s: dict[str, float] = {}
    cache: dict[str, FederatedData] = {}
    start = time.perf_counter()
    for case, engine, tracked in plan(args):
        row = Row(case.label, engine, tracked)
        rows.append(row)
        cfg = config(case, "sequential", args)
        row.clients = f"{cfg.dataset.num_clients} / {cfg.clients_per_round}"
        blocker = vectorised_blocker(cfg)
        if engine == "vectorised" and blocker is not None:
            row.note = f"n/a: {blocker}"
            continue
        if time.perf_counter() - start > args.budget:
            row.note = f"skipped: the {args.budget:.0f} s budget was spent"
            continue
        cfg = config(case, engine, args)
        key = json.dumps(cfg.dataset.model_dump(mode="json"), sort_keys=True) + str(cfg.seed)
        if key not in cache:
            t0 = time.perf_counter()
            cache.clear()  # one dataset on the device at a time
            cache[key] = build_federated_data(cfg.dataset, cfg.seed, resolve_device(cfg.device),
                                              cfg.clients)
            if cfg.device.startswith("cuda"):
                torch.cuda.synchronize()
            data_s[case.recipe] = time.perf_counter() - t0
        try:
            time_run(cfg, cache[key], tracked, args, row)
        except Exception as exc:  # noqa: BLE001  (one failed run must not lose the table)
            row.note = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        print(f"{row.recipe} {row.engine} tracked={row.tracked}: {row.round_s} s/round "
              f"{row.note}", flush=True)
        write(rows, data_s, args)
    return rows, data_s


def write(rows: list[Row], data_s: dict[str, float], args: argparse.Namespace) -> str:
    """The table to ``args.out`` (and the raw times beside it, as JSON)."""
    text = table(rows, data_s, args)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"data_s": data_s, "rows": [asdict(r) for r in rows]}, indent=1))
    return text


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[Row], data_s: dict[str, float], args: argparse.Namespace) -> str:
    """The markdown table, with the machine, torch, commit and date above it."""
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    head = [
        f"# Paper recipes on synthetic CIFAR-10 ({time.strftime('%Y-%m-%d')})", "",
        f"device: {name}; torch {torch.__version__}; commit {args.commit}; "
        f"{args.warmup} warm-up + {args.rounds} timed rounds per run"
        f"{'; tiny sizes (dry run)' if args.tiny else ''}.",
        "data built (s): " + ", ".join(f"{k} {v:.2f}" for k, v in data_s.items()), "",
        "| recipe | engine | tracked | clients / per round | s per round (median) "
        "| eval extra s | setup+end s | 500 rounds (min) | peak GPU GiB | GPU util % "
        "| vec/seq | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    seq = {(r.recipe, r.tracked): r.round_s for r in rows if r.engine == "sequential"}
    lines = []
    for r in rows:
        base = seq.get((r.recipe, r.tracked))
        ratio = (r.round_s / base if r.engine == "vectorised" and r.round_s and base
                 else None)
        lines.append(
            f"| {r.recipe} | {r.engine} | {'yes' if r.tracked else 'no'} | {r.clients} "
            f"| {_fmt(r.round_s, '.3f')} | {_fmt(r.eval_extra_s, '.3f')} "
            f"| {_fmt(r.setup_end_s, '.1f')} | {_fmt(r.projected_min, '.2f')} "
            f"| {_fmt(r.peak_gib, '.2f')} | {_fmt(r.gpu_util, '.0f')} | {_fmt(ratio, '.2f')} "
            f"| {r.note} |")
    return "\n".join([*head, *lines, ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds per run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget", type=float, default=280.0,
                        help="seconds after which no further run starts")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU dry run)")
    parser.add_argument("--commit", default=os.environ.get("COMMIT", "unknown"))
    parser.add_argument("--out", type=Path, default=Path("gpu_table.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedcore-gpu-") as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
        os.environ["FEDCORE_ARTIFACT_LOCATION"] = f"{tmp}/artifacts"
        rows, data_s = run_all(args)
    print(write(rows, data_s, args))
    return 0 if not any(r.note.startswith("failed") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

