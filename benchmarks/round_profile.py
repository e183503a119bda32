"""Where a round's time goes: the CRAFT CIFAR-10 recipe (ResNet-20 with GroupNorm, batch 20,
1 epoch, CRAFT layer-wise) on synthetic CIFAR-10 at a small scale, each engine, timed by phase
and under the PyTorch profiler.

    .venv/bin/python -m benchmarks.round_profile [--device cpu] [--clients 100] [--per-round 10]

Prints, per engine: process CPU seconds per phase of a round (train, aggregate, evaluate, the
rest of the loop; CPU time, not wall time, so that other jobs on a shared machine do not count),
what a GPU would pay per launch or wait (operators run per round, host synchronisations, i.e.
``aten::_local_scalar_dense`` calls, copies and concatenations), then the profiler's operators
by self time in two groups: the model's own kernels (the SGD work: convolutions, GroupNorm,
linear, ReLU, loss and their backward passes) and everything else (indexing, copies,
concatenation, host-device transfers, the optimiser's arithmetic, ...).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from fedcore.core.callbacks import evaluation
from fedcore.core.compose.configure import load_config
from fedcore.core.config import config_dir
from fedcore.core.round.simulation import Simulation

RECIPE = config_dir() / "experiments" / "craft.yaml"
# operators that are the model's forward/backward (the SGD kernels); the rest is overhead
MODEL_OPS = ("conv", "group_norm", "native_group_norm", "addmm", "mm", "bmm", "linear", "relu",
             "threshold", "cross_entropy", "log_softmax", "nll_loss", "mean", "pad",
             "convolution", "mkldnn", "cudnn", "_softmax", "gemm")


def _is_model_op(name: str) -> bool:
    low = name.lower()
    return any(k in low for k in MODEL_OPS)


class PhaseClock:
    """Process CPU seconds per named phase (on CUDA: wall seconds, synchronised around each)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.seconds = device, {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._sync()
            t0 = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self._sync()
                self.seconds[name] = self.seconds.get(name, 0.0) + self.now() - t0
        return timed

    def now(self) -> float:
        return time.perf_counter() if self.device.type == "cuda" else time.process_time()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def overrides(args: argparse.Namespace, engine: str) -> list[str]:
    samples = args.clients * args.samples_per_client
    return ["dataset.name=synthetic_cifar10", f"dataset.synthetic_samples={samples}",
            f"dataset.num_clients={args.clients}", "dataset.min_samples=10",
            f"clients_per_round={args.per_round}", f"rounds={args.rounds + 1}",
            f"eval_every={args.eval_every}", f"device={args.device}", f"engine={engine}"]


def profile_engine(args: argparse.Namespace, engine: str) -> dict[str, Any]:
    sim = Simulation(load_config(RECIPE, overrides(args, engine)))
    clock = PhaseClock(sim.device)
    sim.engine.train_round = clock.wrap("train", sim.engine.train_round)  # type: ignore[union-attr]
    sim.aggregate = clock.wrap("aggregate", sim.aggregate)  # type: ignore[method-assign]
    original_eval = evaluation.evaluate
    evaluation.evaluate = clock.wrap("evaluate", original_eval)
    try:
        sim.cfg = sim.cfg.model_copy(update={"rounds": 1})
        sim.run()  # warm-up round (first calls, allocator, vmap tracing)
        clock.seconds.clear()
        sim.cfg = sim.cfg.model_copy(update={"rounds": args.rounds + 1})
        acts = [torch.profiler.ProfilerActivity.CPU]
        if sim.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            t0 = clock.now()
            sim.run()
            total = clock.now() - t0
    finally:
        evaluation.evaluate = original_eval
    phases = {k: v / args.rounds for k, v in clock.seconds.items()}
    phases["rest of the loop"] = total / args.rounds - sum(phases.values())
    events = prof.key_averages()
    ops = [(e.key, e.self_cpu_time_total / 1e6 / args.rounds) for e in events]
    ops.sort(key=lambda kv: -kv[1])
    calls = {e.key: e.count / args.rounds for e in events}
    counts = {
        "operators": sum(c for k, c in calls.items() if k.startswith("aten::")),
        "host syncs (_local_scalar_dense)": calls.get("aten::_local_scalar_dense", 0.0),
        "copies (copy_)": calls.get("aten::copy_", 0.0),
        "concatenations (cat)": calls.get("aten::cat", 0.0),
        "gathers (index)": calls.get("aten::index", 0.0),
    }
    model = [(k, s) for k, s in ops if _is_model_op(k)]
    other = [(k, s) for k, s in ops if not _is_model_op(k)]
    return {"engine": sim.engine_name, "round_s": total / args.rounds, "phases": phases,
            "counts": counts, "model": model, "other": other}


def report(res: dict[str, Any], top: int) -> None:
    print(f"\n== engine {res['engine']}: {res['round_s']:.3f} s per round")
    for name, s in sorted(res["phases"].items(), key=lambda kv: -kv[1]):
        print(f"   {name:<18} {s:8.3f} s  {100 * s / res['round_s']:5.1f} %")
    print(" per round:")
    for name, n in res["counts"].items():
        print(f"   {name:<36} {n:9.0f}")
    for title, rows in (("model kernels (SGD work)", res["model"]),
                        ("everything else", res["other"])):
        total = sum(s for _, s in rows)
        print(f" {title}: {total:.3f} s self CPU per round")
        for name, s in rows[:top]:
            print(f"   {name:<44} {s * 1e3:9.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--samples-per-client", type=int, default=40)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="profiled rounds after a warm-up")
    parser.add_argument("--eval-every", type=int, default=1)
    parser.add_argument("--engines", default="sequential,vectorised")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = [profile_engine(args, e) for e in args.engines.split(",")]
    for res in results:
        report(res, args.top)
    if len(results) == 2:
        print(f"\nvectorised/sequential seconds per round: "
              f"{results[1]['round_s'] / results[0]['round_s']:.2f}")


if __name__ == "__main__":
    main()
