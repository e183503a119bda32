"""The bucketed vectorised engine on CRAFT's recipe: seconds per round of local training, the
padding efficiency, and whether ``torch.compile`` of the bucketed step pays
(``benchmarks/gpu_check.sh``; docs/how-to/gpu.md).

    python3 -m benchmarks.bucketed --device cuda --rounds 5 --compile auto
    python3 -m benchmarks.bucketed --device cpu --rounds 1 --tiny        # the dry run

Only the engine's ``train_round`` is timed, on each round's sampled clients (the run's own
draw; the global model stays the initial one), after ``--warmup`` rounds; the figure is the
median. With ``--compile yes`` (``auto``: only on an H100 or H200) the same rounds run again
with each chunk's ``vmap(grad(...))`` step under ``torch.compile``: the first compiled round's
seconds (compilation included) and the median of the others are reported, with the largest
difference of a client's delta from the eager engine's. It pays where the compiled median is
below the eager one and the compilation is won back within the 500 rounds of the recipe.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks._common import print_figures
from fedcore.core.compose.configure import load_config
from fedcore.core.config import config_dir
from fedcore.core.engines.vectorised import VectorisedEngine
from fedcore.core.records import ClientUpdate
from fedcore.core.round.simulation import Simulation

RECIPE = config_dir() / "experiments" / "craft.yaml"
RECIPE_ROUNDS = 500
TINY = ["dataset.synthetic_samples=200", "dataset.num_clients=8", "clients_per_round=4",
        "dataset.min_samples=5"]
FAST_GPUS = ("H100", "H200")


def _rounds(sim: Simulation, engine: VectorisedEngine, rounds: range
            ) -> tuple[list[float], dict[int, ClientUpdate]]:
    """Seconds of ``engine.train_round`` on each of ``rounds``, and the last round's updates."""
    seconds: list[float] = []
    updates: dict[int, ClientUpdate] = {}
    for r in rounds:
        sampled = list(map(int, sim.sample_clients(r)))
        rc = sim.round_context(r)
        sim.chain.begin_round(rc, sampled)
        if sim.device.type == "cuda":
            torch.cuda.synchronize(sim.device)
        t0 = time.perf_counter()
        updates = engine.train_round(rc, sampled)
        if sim.device.type == "cuda":
            torch.cuda.synchronize(sim.device)
        seconds.append(time.perf_counter() - t0)
    return seconds, updates


def should_compile(choice: str, device: torch.device) -> tuple[bool, str]:
    """(try torch.compile, why) for ``--compile`` on ``device``."""
    if choice != "auto":
        return choice == "yes", f"--compile {choice}"
    if device.type != "cuda":
        return False, "not an H100/H200 (auto)"
    name = torch.cuda.get_device_name(device)
    fast = any(g in name for g in FAST_GPUS)
    return fast, f"{name}{'' if fast else ': not an H100/H200'} (auto)"


def measure(args: argparse.Namespace) -> dict[str, object]:
    over = ["dataset.name=synthetic_cifar10", "engine=vectorised", f"device={args.device}",
            *(TINY if args.tiny else [])]
    sim = Simulation(load_config(RECIPE, over))
    engine = sim.engine
    if not isinstance(engine, VectorisedEngine):
        raise SystemExit(f"bucketed: the recipe trains with {sim.engine_name}, not vectorised")
    warm = range(1, args.warmup + 1)
    timed = range(args.warmup + 1, args.warmup + args.rounds + 1)
    _rounds(sim, engine, warm)
    eager, reference = _rounds(sim, engine, timed)
    eager_s = statistics.median(eager)
    out: dict[str, object] = {
        "device": str(sim.device) + (f" ({torch.cuda.get_device_name(sim.device)})"
                                     if sim.device.type == "cuda" else ""),
        "clients_per_round": sim.cfg.clients_per_round,
        "eager_s_per_round": eager_s,
        "padding_efficiency": engine.passes.efficiency,
        "chunks": list(engine.last_chunks),
    }
    attempt, why = should_compile(args.compile, sim.device)
    out["compile"] = why if not attempt else "tried: " + why
    if not attempt:
        return out
    engine.compile_step = True
    try:
        first, _ = _rounds(sim, engine, range(timed.start, timed.start + 1))
        compiled, updates = _rounds(sim, engine, timed)
    except Exception as e:  # noqa: BLE001 - any compiler failure is the answer
        out["compile"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return out
    median = statistics.median(compiled)
    saved = eager_s - median
    out |= {
        "compile_first_round_s": first[0],
        "compiled_s_per_round": median,
        "compiled_speedup": eager_s / median,
        "max_delta_diff": max(float((updates[c].delta - reference[c].delta).abs().max())
                              for c in reference),
        "compile_pays": bool(saved > 0 and first[0] - median < saved * RECIPE_ROUNDS),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--compile", default="auto", choices=["auto", "yes", "no"])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU dry run)")
    parser.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        print("bucketed: --rounds must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    print_figures(measure(args), 24, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
