"""Golden histories: a few method configs for 3 rounds, recorded bit for bit, to check that a speed
change leaves every number as it was (same seed, one torch thread, same engine).

    .venv/bin/python -m benchmarks.golden record FILE   # before a change
    .venv/bin/python -m benchmarks.golden check FILE    # after it: exit 1 on any difference

Each config's history (every metric of every round, ``agg/seconds`` left out as a wall time), its
per-client tables and its summary are stored as exact float hex strings; the run goes through
``fedcore.tracking.runner.run_tracked`` into a temporary MLflow store when ``--tracked`` is
given, and the metrics read back from the store are compared as well.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CONFIGS: dict[str, list[str]] = {
    "fedavg_cnn": ["method=fedavg", "model.name=cnn"],
    "fedavg_mlp_vectorised": ["method=fedavg", "model.name=mlp", "engine=vectorised",
                              "clients_per_round=8"],
    "craft": ["method=craft", "model.name=cnn"],
    "scaffold": ["method=scaffold", "model.name=mlp"],
    "fedquad": ["method=fedquad", "model.name=mlp"],
    "sapef_topk": ["method=sapef_topk", "model.name=mlp"],
    "crf_fedprox": ["method=crf_fedprox", "model.name=mlp"],
}
TOLERANT = "_vectorised"  # vmapped sums: equal to a relative RTOL, not bit for bit
RTOL = 1e-5
COMMON = ["rounds=3", "local.epochs=1", "seed=0", "device=cpu", "dataset.num_clients=20"]
WALL_TIMES = ("agg/seconds",)


def _exact(value: Any) -> Any:
    """Floats as hex strings (bit-exact), arrays as lists of them; other values as they are."""
    if isinstance(value, float | np.floating):
        return float(value).hex()
    if isinstance(value, np.ndarray):
        return [_exact(v.item()) for v in value.ravel()]
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in sorted(value.items()) if k not in WALL_TIMES}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return value


def record_one(overrides: list[str], tracked: bool) -> dict[str, Any]:
    """One config's history, client tables and summary (and, tracked, the store's metrics)."""
    from fedcore.core.compose.configure import load_config
    from fedcore.core.round.simulation import Simulation

    cfg = load_config(None, [*COMMON, *overrides])
    out: dict[str, Any] = {}
    if tracked:
        from fedcore.tracking.mlflow_tracker import mlflow_client
        from fedcore.tracking.runner import run_tracked

        run_id, result = run_tracked(cfg, resume=False)
        run = mlflow_client().get_run(run_id)
        out["store"] = _exact({k: v for k, v in run.data.metrics.items()
                               if not k.startswith("system/")})
        out["status"] = run.info.status
    else:
        result = Simulation(cfg).run()
    out["history"] = _exact(result.history)
    out["tables"] = [_exact({"round": t.round, "accuracy": t.accuracy, "loss": t.loss,
                             **{f"extra/{k}": v.astype(float) for k, v in t.extra.items()}})
                     for t in result.client_tables]
    out["summary"] = _exact(result.summary)
    return out


def every_method() -> dict[str, list[str]]:
    """Every shipped method config on the MLP: sequential, and vectorised where it applies."""
    from fedcore.core.compose.configure import load_config
    from fedcore.core.config import ConfigError, method_names

    out: dict[str, list[str]] = {}
    for name in method_names():
        out[name] = [f"method={name}", "model.name=mlp", "engine=sequential"]
        vec = [f"method={name}", "model.name=mlp", "engine=vectorised"]
        try:
            load_config(None, [*COMMON, *vec])
        except ConfigError:
            continue
        out[name + TOLERANT] = vec
    return out


def record(tracked: bool, every: bool = False) -> dict[str, Any]:
    torch.set_num_threads(1)
    configs = every_method() if every else CONFIGS
    return {name: record_one(overrides, tracked) for name, overrides in configs.items()}


def _close(golden: Any, now: Any) -> bool:
    """Two recorded values equal to RTOL (floats as hex strings)."""
    try:
        g, n = float.fromhex(golden), float.fromhex(now)
    except (TypeError, ValueError):
        return bool(golden == now)
    return bool(np.isclose(n, g, rtol=RTOL, atol=0.0, equal_nan=True))


def differences(
    golden: dict[str, Any], now: dict[str, Any], path: str = "", tolerant: bool = False
) -> list[str]:
    """Every path where ``now`` differs from ``golden`` (to RTOL where ``tolerant``)."""
    if isinstance(golden, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(golden) | set(now)):
            if key not in golden or key not in now:
                out.append(f"{path}/{key}: only in {'now' if key in now else 'golden'}")
            else:
                tol = tolerant or (not path and key.endswith(TOLERANT))
                out += differences(golden[key], now[key], f"{path}/{key}", tol)
        return out
    if isinstance(golden, list) and isinstance(now, list) and len(golden) == len(now):
        return [d for i, (g, n) in enumerate(zip(golden, now, strict=True))
                for d in differences(g, n, f"{path}[{i}]", tolerant)]
    same = _close(golden, now) if tolerant else golden == now
    return [] if same else [f"{path}: {golden!r} != {now!r}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("action", choices=["record", "check"])
    parser.add_argument("file", type=Path)
    parser.add_argument("--tracked", action="store_true", help="through run_tracked and MLflow")
    parser.add_argument("--every-method", action="store_true",
                        help="every shipped method config (sequential; vectorised where it "
                        f"applies, compared to a relative {RTOL:g})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedcore-golden-") as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
        os.environ["FEDCORE_ARTIFACT_LOCATION"] = f"{tmp}/artifacts"
        now = record(args.tracked, args.every_method)
        from fedcore.tracking.writers import wait_for_runs

        if args.tracked:
            wait_for_runs()
    if args.action == "record":
        args.file.write_text(json.dumps(now, indent=1))
        print(f"recorded {len(now)} configs in {args.file}")
        return 0
    diffs = differences(json.loads(args.file.read_text()), now)
    for line in diffs[:20]:
        print(line)
    print(f"{len(now)} configs: {'identical' if not diffs else f'{len(diffs)} differences'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
